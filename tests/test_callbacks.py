"""The trainer's callbacks: a probe of one's own, handed to the trainer, is called at each hook
and its metrics and records land in the run directory, without touching ``train/``."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from resumable_env import SMALL_RUN

from orsd_gym.errors import ConfigError
from orsd_gym.train.callbacks import TrainerCallback
from orsd_gym.train.config import load_config
from orsd_gym.train.trainer import Trainer

RUN = [
    *SMALL_RUN,
    "train.iterations=2",
    "eval.every=1",
    "eval.num_tasks=1",
    "train.threads=1",
    "logging.live=false",
    "logging.tensorboard=false",
]


@dataclass
class CountingSettings:
    #: Added to every metric, so that the settings visibly reach the hooks.
    offset: float = 0.0


class Counting(TrainerCallback):
    section = "counting"
    Settings = CountingSettings

    def __init__(self, settings=None):
        super().__init__(settings)
        self.calls: list[tuple[str, int]] = []

    def check_config(self, config, algo_settings):
        if config.eval.every == 0:
            raise ConfigError("probes.counting needs evaluations")

    def after_prepare(self, run, batch, iteration):
        self.calls.append(("after_prepare", iteration))
        return {"counting/groups": len({t.group_id for t in batch.trajectories}) + self.settings.offset}

    def before_update(self, run, batch, iteration):
        self.calls.append(("before_update", iteration))
        assert run.policy.trainable_parameters()[0].grad is None  # before the update's first step
        return {"counting/updates": 1.0 + self.settings.offset}

    def after_evaluation(self, run, baseline, iteration):
        self.calls.append(("after_evaluation", iteration))
        return {"counting/episodes": float(len(baseline))}, {"tasks": sorted({t.task_id for t in baseline})}


def test_the_trainer_calls_a_probe_of_its_own_and_records_what_it_measures(tmp_path):
    config = load_config(None, [*RUN, "probes.counting.offset=10", f"train.output_dir={tmp_path}"])
    probe = Counting(CountingSettings(offset=10.0))
    Trainer(config, callbacks=[probe]).run()
    assert probe.calls == [
        ("after_evaluation", 0),
        ("after_prepare", 0),
        ("before_update", 0),
        ("after_evaluation", 1),
        ("after_prepare", 1),
        ("before_update", 1),
        ("after_evaluation", 2),
    ]
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["counting/groups"] for m in metrics] == [12.0, 12.0]
    assert [m["counting/updates"] for m in metrics] == [11.0, 11.0]
    evals = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert [e["counting/episodes"] for e in evals] == [1.0, 1.0, 1.0]
    records = [json.loads(line) for line in (tmp_path / "counting.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2] and all(len(r["tasks"]) == 1 for r in records)
    # The run records the probe's settings with its own.
    assert "offset: 10.0" in (tmp_path / "config.yaml").read_text()


def test_a_probe_checks_the_config_before_anything_is_written(tmp_path):
    config = load_config(None, [*RUN, "eval.every=0", f"train.output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match="probes.counting needs evaluations"):
        Trainer(config, callbacks=[Counting()])
    assert not (tmp_path / "run").exists()
