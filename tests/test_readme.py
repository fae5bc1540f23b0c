"""The README's code blocks, executed, so they cannot drift from the code.

Python blocks run in order as one script (later blocks use names earlier ones import), in a
scratch directory (files they write stay out of the checkout), scaled down: the embedded model
becomes the tiny random one. Every ``orsd-gym`` command line of the bash blocks is parsed by
the real command-line parser, and the config its training commands name (file and dotted
overrides) is loaded and validated; every ``make`` target they name exists.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from itertools import dropwhile
from pathlib import Path

import pytest

from orsd_gym.cli import build_parser
from orsd_gym.train.config import load_config

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(python|bash)\n(.*?)```", README, flags=re.DOTALL)
#: Scaled-down stand-ins for what the README runs at full size.
SCALE_DOWN = {'"smollm2-135m"': '"tiny-random"'}


def _python_script() -> str:
    script = "\n\n".join(code for kind, code in BLOCKS if kind == "python")
    for full, small in SCALE_DOWN.items():
        script = script.replace(full, small)
    webshop = ROOT.parent / "shared" / "data" / "webshop"
    # Without the official data the WebShop block runs on the embedded synthetic catalog.
    data_dir = repr(str(webshop)) if webshop.is_dir() else "None"
    script = script.replace("data_dir=None,", f"data_dir={data_dir},")
    return script


def _commands() -> list[list[str]]:
    """Every command line of the bash blocks, without its leading ``NAME=value`` settings."""
    lines = [line for kind, code in BLOCKS if kind == "bash" for line in code.splitlines()]
    commands = [shlex.split(line, comments=True) for line in lines if line.strip() and not line.startswith("#")]
    return [list(dropwhile(lambda word: re.match(r"^[A-Z_]+=", word), words)) for words in commands]


def _save_own_env(directory: Path) -> None:
    """The README's own-env block, saved as the README says (``letter_env.py``)."""
    (module,) = [code for kind, code in BLOCKS if kind == "python" and "class LetterEnv" in code]
    (directory / "letter_env.py").write_text(module, encoding="utf-8")


def _bash_line(marker: str) -> list[str]:
    """The words of the one README command line that holds ``marker``."""
    (line,) = [line for kind, code in BLOCKS if kind == "bash" for line in code.splitlines() if marker in line]
    return shlex.split(line)


def test_the_readme_has_runnable_blocks():
    assert sum(kind == "python" for kind, _ in BLOCKS) >= 4 and len(_commands()) >= 8


@pytest.mark.slow
def test_python_blocks_run(tmp_path):
    pytest.importorskip("textworld")
    script = tmp_path / "readme_blocks.py"
    script.write_text(_python_script(), encoding="utf-8")
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_the_own_env_compare_runs_as_written(tmp_path):
    """A newcomer's path: the README's env block saved as letter_env.py, then its compare line run
    from that directory as written (scaled down: the tiny model, one iteration)."""
    _save_own_env(tmp_path)
    words = _bash_line("letter_env:")
    assert words[0] == "PYTHONPATH=." and words[1] == "orsd-gym"
    small = ["model.name=tiny-random", "train.iterations=1", "rollout.tasks_per_iteration=2"]
    env = {**os.environ, "PYTHONPATH": ".", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "orsd_gym.cli", *words[2:], *small, "--no-live"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "reports" / "letter" / "report.md").is_file()


def test_the_rollout_line_runs_as_written(tmp_path):
    """The README's rollout line at its documented size, with the tiny model for SmolLM2."""
    words = _bash_line("orsd-gym rollout ")
    words[words.index("smollm2-135m")] = "tiny-random"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "orsd_gym.cli", *words[1:]]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 episodes" in done.stdout and len((tmp_path / "r.jsonl").read_text().splitlines()) == 4


def test_command_lines_parse_and_their_configs_load(tmp_path, monkeypatch):
    _save_own_env(tmp_path)  # the own-env line names the module the README has the reader save
    monkeypatch.syspath_prepend(str(tmp_path))
    parser = build_parser()
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    for words in _commands():
        if words[0] == "make":
            assert words[1] in targets, words
            continue
        if words[0] == "python" and words[1].startswith("benchmarks/"):
            assert (ROOT / words[1]).is_file(), words  # each script's own test runs it
            continue
        assert words[0] == "orsd-gym", words
        args = parser.parse_args(words[1:])
        if args.command in ("train", "compare") or (args.command == "config" and args.action == "show"):
            overrides = list(args.overrides) + ([f"env.id={args.env}"] if getattr(args, "env", None) else [])
            load_config(args.config, overrides)  # every key and name the README uses exists
