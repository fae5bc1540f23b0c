"""A bad day for the disk: a write that finds no room (ENOSPC), a file-size limit (EFBIG), a
read-only (EROFS) or forbidden (EACCES) directory, during a checkpoint, a record or a report.

Each ends in one line naming the file, what was being written, what is intact and what to do;
no partial file is left; the same command (with --resume for a run) goes on from the last good
checkpoint.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from cli_output import message_lines
from resumable_env import ENV_ID as VOWEL_ENV
from safetensors import SafetensorError

from orsd_gym import writable
from orsd_gym.cli import main
from orsd_gym.errors import DiskWriteError
from orsd_gym.rollout.trajectory import load_jsonl, save_jsonl
from orsd_gym.train import checkpoint
from orsd_gym.train.metrics import read_metrics

TESTS = Path(__file__).parent / "helpers"
ERRNOS = {
    errno.ENOSPC: r"the disk under .* is full \(\d+ bytes to write, \d+ bytes free\).*free space",
    errno.EFBIG: r"would exceed this process's file-size limit.*raise the limit \(ulimit -f\)",
    errno.EROFS: r"is on a read-only file system.*make it writable",
    errno.EACCES: r"permission denied in .*make it writable",
}
RUN = [
    "model.name=tiny-random",
    f"env.id={VOWEL_ENV}",
    "rollout.tasks_per_iteration=1",
    "rollout.group_size=2",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=4",
    "rollout.action_format=last_line",
    "eval.every=0",
    "eval.num_tasks=1",
    "train.iterations=2",
    "train.threads=1",
    "logging.tensorboard=false",
]


def _train(out: Path, *flags: str) -> int:
    config = out.parent / "base.yaml"
    config.write_text("{}\n")
    return main(["train", "--config", str(config), "--no-live", *flags, *RUN, f"train.output_dir={out}"])


def _one_line_error(capsys) -> str:
    lines = message_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def _leftovers(directory: Path) -> list[str]:
    """Partial files of any write: a checkpoint's staging directory or a file written beside its target."""
    return [str(p) for p in directory.rglob("*") if ".tmp-" in p.name or ".partial-" in p.name]


def _fail_call(number: int, real, raise_it):
    """``real``, except that call ``number`` (counted from 1) is ``raise_it``."""
    calls = []

    def write(*args, **kwargs):
        calls.append(1)
        return (raise_it if len(calls) == number else real)(*args, **kwargs)

    return write


@pytest.mark.parametrize("code", sorted(ERRNOS))
def test_a_checkpoint_write_that_fails_says_so_in_one_line_and_the_run_resumes(tmp_path, monkeypatch, capsys, code):
    """safetensors reports the OS error inside its own error ("... (os error 28)")."""

    def half_then_error(tensors, path, *args, **kwargs):
        Path(path).write_bytes(b"half a tensor file")
        raise SafetensorError(f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})")

    # A checkpoint writes two safetensors files: the third write is the second checkpoint's weights.
    monkeypatch.setattr(checkpoint, "save_file", _fail_call(3, checkpoint.save_file, half_then_error))
    out = tmp_path / "run"
    assert _train(out) == 2
    line = _one_line_error(capsys)
    assert "could not write checkpoint iter_000002 to " in line
    assert "the last good checkpoint (iter_000001, iteration 1) is intact" in line
    assert line.endswith("then continue from the last checkpoint with the same command and --resume")
    assert re.search(ERRNOS[code], line), line
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["iter_000001"] and not _leftovers(out)

    monkeypatch.undo()
    assert _train(out, "--resume") == 0
    assert "resumed" in capsys.readouterr().out
    assert [r["iteration"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert checkpoint.latest_good_checkpoint(out / "checkpoints").iteration == 2


@pytest.mark.parametrize("code", sorted(ERRNOS))
def test_a_record_write_that_fails_is_cut_back_and_the_run_resumes(tmp_path, monkeypatch, capsys, code):
    """The second iteration's metrics line is written, then the disk refuses it (at fsync, as
    a file system that allocates late does): the file ends with the first iteration's line."""
    out = tmp_path / "run"
    real_fsync = os.fsync

    def refuse_second_metrics(fd):
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if path.name == "metrics.jsonl" and path.read_text().count("\n") == 2:
            raise OSError(code, os.strerror(code))
        return real_fsync(fd)

    monkeypatch.setattr(writable.os, "fsync", refuse_second_metrics)
    assert _train(out) == 2
    line = _one_line_error(capsys)
    assert "could not write the metrics of iteration 2 to " in line and "metrics.jsonl" in line
    assert "the last good checkpoint (iter_000001, iteration 1) is intact" in line
    assert [r["iteration"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    assert (out / "metrics.jsonl").read_text().endswith("}\n") and not _leftovers(out)

    monkeypatch.undo()
    assert _train(out, "--resume") == 0
    assert [r["iteration"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    assert _train(out) == 0
    return out


@pytest.mark.parametrize("code", sorted(ERRNOS))
def test_a_report_write_that_fails_keeps_the_old_report_whole(finished_run, tmp_path, monkeypatch, capsys, code):
    """The credit heatmap (a report, like report.md, results.json, the plots and trajectories)
    is written beside its target and renamed into place: a failed write says so in one line,
    removes its partial file and leaves the report that was there."""
    page = tmp_path / "credit.html"
    page.write_text("the previous heatmap\n")
    real_replace = os.replace

    def refuse(source, target):
        if Path(target) == page:
            assert Path(source).read_text().startswith("<!doctype html>")  # the whole new file, beside it
            raise OSError(code, os.strerror(code))
        return real_replace(source, target)

    monkeypatch.setattr(writable.os, "replace", refuse)
    inspect = ["inspect", str(finished_run), "--iteration", "1", "--html", str(page)]
    assert main(inspect) == 2
    line = _one_line_error(capsys)
    assert line.startswith(f"orsd-gym inspect: error: could not write the credit heatmap to {page}: ")
    assert re.search(ERRNOS[code], line) and line.endswith("then run the same command again")
    assert page.read_text() == "the previous heatmap\n" and not _leftovers(tmp_path)
    monkeypatch.undo()
    assert main(inspect) == 0 and page.read_text().startswith("<!doctype html>")


def test_a_full_disk_during_a_rollout_write_is_one_line_with_no_partial_file(tmp_path):
    """A real file-size limit (``ulimit -f``): the trajectories file stops growing mid-write
    (EFBIG); the rollout says so in one line and leaves no half file."""
    out = tmp_path / "trajectories.jsonl"
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import resumable_env; "
        "from orsd_gym.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    args = ["rollout", "--env", f"resumable_env:{VOWEL_ENV}", "--model", "tiny-random", "--out", str(out)]
    args += ["--tasks", "2", "--group", "2", "--max-new-tokens", "8", "--quiet"]

    def limit_files_to_2kb():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=limit_files_to_2kb,
    )
    lines = message_lines(done.stderr)
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"orsd-gym rollout: error: could not write trajectories to {out}: the file would exceed" in lines[0]
    assert lines[0].endswith("raise the limit (ulimit -f), then run the same command again")
    assert not out.exists() and not _leftovers(tmp_path)
    # The same command without the limit writes them all.
    assert (
        subprocess.run([sys.executable, "-c", code, *args], capture_output=True, env=env, timeout=300).returncode == 0
    )
    assert len(load_jsonl(out)) == 4


def _refused(code: int):
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    return refuse


def test_a_failed_write_or_append_removes_what_it_wrote(tmp_path, monkeypatch):
    """`save_jsonl` (a rollout's or an evaluation's trajectories) and an append (a run's
    records) leave no trace of a failed write."""
    monkeypatch.setattr(writable.os, "replace", _refused(errno.ENOSPC))
    with pytest.raises(DiskWriteError, match="could not write trajectories .* the disk under .* is full"):
        save_jsonl([], tmp_path / "t.jsonl")
    monkeypatch.undo()
    record = tmp_path / "records.jsonl"
    record.write_text('{"iteration": 1}\n')
    monkeypatch.setattr(writable.os, "fsync", _refused(errno.EFBIG))
    with pytest.raises(DiskWriteError, match="could not write a record .* file-size limit"):
        writable.append_text(record, '{"iteration": 2}\n', "a record")
    assert record.read_text() == '{"iteration": 1}\n' and not _leftovers(tmp_path)


def test_an_unwritable_heatmap_or_evaluation_output_is_refused_before_any_work(finished_run, monkeypatch, capsys):
    from orsd_gym.cli import inspect as inspect_command

    loaded = []
    monkeypatch.setattr(inspect_command, "load_credit", lambda *args: loaded.append(args))
    assert main(["inspect", str(finished_run), "--iteration", "1", "--html", "/proc/credit.html"]) == 2
    assert _one_line_error(capsys) == (
        "orsd-gym inspect: error: --html='/proc/credit.html': cannot write in /proc (No such file or directory)"
    )
    assert not loaded  # nothing was loaded or scored
    assert main(["eval", "--checkpoint", str(finished_run), "--out", "/proc/eval.jsonl"]) == 2
    assert "--out='/proc/eval.jsonl': cannot write in /proc" in _one_line_error(capsys)
