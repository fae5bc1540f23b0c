"""Code of one's own (an env, an algorithm, a probe) reaches every command and process through a
config's ``plugins`` or an installed package's ``orsd_gym.plugins`` entry point.

What a plugin registers is global to a process, so every test that imports one runs it in a
fresh interpreter: the test session's registries stay as the other tests expect them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from orsd_gym.errors import PluginError
from orsd_gym.train.config import load_config
from orsd_gym.train.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]

#: A user's file: an env (registered without a ``module:`` prefix in its id), an algorithm built
#: on GRPO with a setting of its own, and a probe that logs a metric every iteration.
PLUGIN = """
from dataclasses import dataclass

from orsd_gym.algos import GRPO, GRPOConfig, register_algorithm
from orsd_gym.envs import StepOutcome, TextEnv, register_text_env
from orsd_gym.probes import register_probe
from orsd_gym.train.callbacks import TrainerCallback


class VowelsEnv(TextEnv):
    @property
    def tasks(self):
        return ("bird", "tree", "song", "lake")

    def _task_text(self, task_id):
        return f"write a {self.tasks[task_id]} word with many vowels."

    def _start_task(self, task_id, options):
        return f"Your task is to: {self._task_text(task_id)}", {}

    def _play(self, action):
        letters = [c for c in action.lower() if c.isalpha()]
        score = sum(c in "aeiou" for c in letters) / max(1, len(letters))
        return StepOutcome(f"Score {score:.2f}.", reward=score, terminated=True, won=score > 0.5)


register_text_env("PluginVowels", VowelsEnv, max_episode_steps=1, description="a plugin's env")


@dataclass
class HalvedConfig(GRPOConfig):
    #: What the advantages are multiplied by.
    factor: float = 0.5


@register_algorithm
class HalvedGRPO(GRPO):
    name = "halved_grpo"
    config_class = HalvedConfig


@dataclass
class CountSettings:
    every: int = 0


@register_probe
class Count(TrainerCallback):
    section = "plugin_count"
    Settings = CountSettings

    def after_prepare(self, run, batch, iteration):
        return {"plugin/seen": float(len(batch.advantages))} if self.settings.every else {}
"""

SETTINGS = [
    "model.name=tiny-random",
    "env.id=orsd_gym/PluginVowels-v0",
    "algo.name=halved_grpo",
    "algo.per_algo.halved_grpo.factor=0.25",
    "probes.plugin_count.every=1",
    "rollout.tasks_per_iteration=2",
    "rollout.group_size=2",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=6",
    "rollout.action_format=last_line",
    "eval.every=0",
    "eval.num_tasks=0",
]


def _cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    command = [sys.executable, "-m", "orsd_gym.cli", *args]
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    path = tmp_path / "my_plugin.py"
    path.write_text(textwrap.dedent(PLUGIN))
    (tmp_path / "empty.yaml").write_text("{}\n")
    return path


def test_a_plugin_file_registers_its_env_algorithm_and_probe_for_a_command(plugin, tmp_path):
    shown = _cli(tmp_path, "config", "show", "--config", "empty.yaml", "plugins=[my_plugin.py]", *SETTINGS)
    assert shown.returncode == 0, shown.stderr
    record = yaml.safe_load(shown.stdout)
    assert record["plugins"] == ["my_plugin.py"]
    assert record["algo"]["per_algo"]["halved_grpo"]["factor"] == 0.25
    assert record["probes"]["plugin_count"] == {"every": 1}
    # The same settings without the plugin name an algorithm nobody registered.
    refused = _cli(tmp_path, "config", "show", "--config", "empty.yaml", *SETTINGS)
    assert refused.returncode != 0 and "halved_grpo" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_run_with_a_plugin_trains_and_resumes_in_a_fresh_process(plugin, tmp_path):
    """The plugin is recorded with the run, so resuming it needs nothing but the same command."""
    run = [*SETTINGS, "plugins=[my_plugin.py]", "train.output_dir=out"]
    first = _cli(tmp_path, "train", "--config", "empty.yaml", "--no-live", *run, "train.iterations=1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["plugins"] == ["my_plugin.py"]
    more = ["--resume", "--allow-change", "train.iterations", *run, "train.iterations=2"]
    again = _cli(tmp_path, "train", "--config", "empty.yaml", "--no-live", *more)
    assert again.returncode == 0, again.stderr[-3000:]
    records = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    # Two groups of two attempts, one sample each: the probe ran in both processes.
    assert [r["plugin/seen"] for r in records] == [4.0, 4.0]


def test_plugin_errors_name_the_plugin_and_the_cause(tmp_path):
    with pytest.raises(PluginError, match="no module named 'no_such_plugin_module'"):
        load_config(None, ["plugins=[no_such_plugin_module]"])
    with pytest.raises(PluginError, match="is not a file"):
        load_config(None, [f"plugins=[{tmp_path / 'missing.py'}]"])
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("import no_such_dependency_module\n")
    with pytest.raises(PluginError, match="does not import: ModuleNotFoundError"):
        load_config(None, [f"plugins=[{broken}]"])
    raising = tmp_path / "raising_plugin.py"
    raising.write_text("raise RuntimeError('half-written plugin')\n")
    with pytest.raises(PluginError, match="half-written plugin"):
        load_config(None, [f"plugins=[{raising}]"])
    assert "raising_plugin" not in " ".join(sys.modules)  # a failed import leaves no half module


def _installed(tmp_path: Path, module_text: str) -> dict:
    """A package 'orsd-plugin-demo' installed in ``tmp_path`` with one ``orsd_gym.plugins`` entry point."""
    (tmp_path / "orsd_plugin_demo.py").write_text(textwrap.dedent(module_text))
    info = tmp_path / "orsd_plugin_demo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: orsd-plugin-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[orsd_gym.plugins]\ndemo = orsd_plugin_demo\n")
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}


def test_an_installed_packages_entry_point_plugin_is_imported_with_the_config(plugin, tmp_path):
    env = _installed(tmp_path, PLUGIN)
    shown = _cli(tmp_path, "config", "show", "--config", "empty.yaml", *SETTINGS, env=env)
    assert shown.returncode == 0, shown.stderr
    assert yaml.safe_load(shown.stdout)["algo"]["name"] == "halved_grpo"


def test_a_broken_entry_point_plugin_is_one_line_naming_its_package(plugin, tmp_path):
    env = _installed(tmp_path, "raise RuntimeError('broken on import')\n")
    shown = _cli(tmp_path, "config", "show", "--config", "empty.yaml", env=env)
    assert shown.returncode != 0
    assert "orsd-plugin-demo 0.1" in shown.stderr and "broken on import" in shown.stderr
    assert "Traceback" not in shown.stderr


def test_a_ray_train_worker_imports_the_plugins_before_it_reads_their_probes(plugin, tmp_path):
    """What `_train_on_ray` hands each worker, pickled as Ray does, read in another interpreter."""
    pytest.importorskip("ray")
    write = f"""
        import sys
        from ray import cloudpickle
        from orsd_gym.probes import probes_for
        from orsd_gym.train.config import load_config
        from orsd_gym.train.launch import worker_payload

        config = load_config(None, ["plugins=[my_plugin.py]", *{SETTINGS!r}])
        options = {{"resume": False, "callbacks": tuple(probes_for(config))}}
        open("payload.pkl", "wb").write(cloudpickle.dumps(worker_payload(config, options, False)))
    """
    read = """
        import os, pickle
        from orsd_gym.algos.base import registered_algorithms
        from orsd_gym.train.launch import trainer_options

        os.chdir("/")  # a worker's working directory is not the driver's
        payload = pickle.load(open(os.environ["PAYLOAD"], "rb"))
        options = trainer_options(payload)
        names = sorted(type(c).__name__ for c in options["callbacks"])
        count = next(c for c in options["callbacks"] if type(c).__name__ == "Count")
        print(names, count.settings.every, "halved_grpo" in registered_algorithms())
    """
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PAYLOAD": str(tmp_path / "payload.pkl")}
    for code in (write, read):
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert "'Count'" in done.stdout and done.stdout.strip().endswith("1 True")
