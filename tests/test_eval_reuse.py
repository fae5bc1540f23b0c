"""Evaluations reused across runs (``eval.reuse_dir``): only the same weights, tasks and settings
are read back, and what is read back is what playing it gives."""

from __future__ import annotations

import json
from pathlib import Path

from resumable_env import SMALL_RUN

from orsd_gym.experiments.compare import Arm, run_config
from orsd_gym.train.config import load_config
from orsd_gym.train.trainer import Trainer

RUN = [
    *SMALL_RUN,
    "train.iterations=1",
    "eval.every=1",
    "eval.num_tasks=2",
    "train.threads=1",
    "logging.live=false",
    "logging.tensorboard=false",
]
#: What a reused evaluation may record differently from a played one.
TIMING = ("eval/time", "eval/reused")


def _evaluations(tmp_path: Path, name: str, *overrides: str) -> list[dict]:
    config = load_config(None, [*RUN, f"train.output_dir={tmp_path / name}", *overrides])
    Trainer(config, callbacks=()).run()
    return [json.loads(line) for line in (tmp_path / name / "eval.jsonl").read_text().splitlines()]


def _played(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}


def test_an_evaluation_of_the_same_start_is_read_back_and_equals_playing_it(tmp_path):
    reuse = f"eval.reuse_dir={tmp_path / 'evaluations'}"
    first = _evaluations(tmp_path, "grpo", reuse)
    second = _evaluations(tmp_path, "gigpo", reuse, "algo.name=gigpo")
    played = _evaluations(tmp_path, "gigpo-played", "algo.name=gigpo")
    # The start (the same weights of the same seed) is read back; after an update it is played.
    assert "eval/reused" not in first[0] and second[0]["eval/reused"] == 1.0
    assert "eval/reused" not in second[1]
    assert _played(second[0]) == _played(first[0]) == _played(played[0])
    assert len(list((tmp_path / "evaluations").iterdir())) == 3  # the start, each run's end


def test_other_settings_or_a_torn_record_are_played_again(tmp_path):
    reuse = f"eval.reuse_dir={tmp_path / 'evaluations'}"
    _evaluations(tmp_path, "first", reuse, "train.iterations=0")
    longer = _evaluations(tmp_path, "longer", reuse, "train.iterations=0", "rollout.max_new_tokens=7")
    assert "eval/reused" not in longer[0]
    [start] = [
        d
        for d in (tmp_path / "evaluations").iterdir()
        if (d / "settings.json").read_text().count('"max_new_tokens": 6')
    ]
    (start / "metrics.json").write_text('{"eval/success_rate": 0.')  # torn
    again = _evaluations(tmp_path, "again", reuse, "train.iterations=0")
    assert "eval/reused" not in again[0]
    assert json.loads((start / "metrics.json").read_text())["eval/success_rate"] == again[0]["eval/success_rate"]


def test_a_comparison_reuses_evaluations_in_its_report_directory(tmp_path):
    base = load_config(None, RUN)
    config = run_config(base, Arm.parse("grpo"), 0, tmp_path)
    assert config.eval.reuse_dir == str(tmp_path / "evaluations")
