"""ORSD's rubric sources (the method, its positive and negative controls, a person's file), the
comparison arms that select them, and the report a researcher reads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from algos_helpers import make_group

from orsd_gym.algos.base import make_algorithm
from orsd_gym.algos.orsd.sources import ShuffledRubrics, file_bundles, load_rubric_file
from orsd_gym.errors import ConfigError, UsageError
from orsd_gym.train.compare import Arm, run_config
from orsd_gym.train.config import load_config
from orsd_gym.train.report import Estimate, coinciding_arms, mean_ci


def test_arms_name_an_algorithm_and_a_rubric_source(tmp_path):
    assert Arm.parse("grpo") == Arm("grpo", "grpo", {})
    assert Arm.parse("orsd:expert") == Arm("orsd:expert", "orsd", {"rubric_source": "expert"})
    with pytest.raises(UsageError, match="rubric source"):
        Arm.parse("orsd:oracle")
    with pytest.raises(UsageError):
        Arm.parse("grpo:expert")
    base = load_config(None, ["env.id=orsd_gym/GuessNumber-v0", "eval.num_tasks=4", "env.kwargs={}"])
    with pytest.raises(ConfigError, match="needs the env's expert plan"):
        run_config(base, Arm.parse("orsd:expert"), 1, tmp_path)  # GuessNumber has no expert


def test_rubric_files_map_task_keys_or_star_to_bundles(tmp_path):
    path = tmp_path / "rubrics.yaml"
    path.write_text("'env:task-1': [checks the door, opens it]\n'*': [[looks around first], [reads the hint]]\n")
    table = load_rubric_file(path)
    assert file_bundles(table, "env:task-1") == [["checks the door", "opens it"]]
    assert file_bundles(table, "env:task-2") == [["looks around first"], ["reads the hint"]]
    path.write_text("'*': 3\n")
    with pytest.raises(ConfigError, match="list of criteria"):
        load_rubric_file(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_rubric_file(tmp_path / "missing.yaml")


def test_shuffled_rubrics_never_lend_a_task_its_own():
    pool = ShuffledRubrics()
    rng = np.random.default_rng(0)
    pool.remember("a", ["rubric of a"])
    assert pool.lend("a", rng) is None  # nothing written for another task yet
    pool.remember("b", ["rubric of b"])
    pool.remember("c", ["rubric of c"])
    for _ in range(50):
        key, bundle = pool.lend("a", rng)
        assert key != "a" and bundle == [f"rubric of {key}"]
    assert ShuffledRubrics(pool.state()).pool == pool.pool  # checkpointed and restored


def test_file_rubrics_go_through_verification_and_selection(policy, tmp_path):
    path = tmp_path / "rubrics.yaml"
    path.write_text("'*': [[Guesses the middle first], [Reads the hint before guessing]]\n")
    group = make_group(policy, successes=[True, False, False], group_id=0, task_id=0, seed=3)
    orsd = make_algorithm("orsd", {"rubric_source": "file", "rubric_file": str(path), "min_corr": -1.0})
    batch = orsd.prepare(group, policy, iteration=0, rng=np.random.default_rng(0))
    (record,) = batch.audit
    assert record["rubric_source"] == "file" and record["bundles"] == [
        ["Guesses the middle first"],
        ["Reads the hint before guessing"],
    ]
    assert record["scores"] is not None and record["selected"] in (0, 1)


def test_intervals_stay_in_the_metric_range_and_say_when_there_are_too_few_seeds():
    wide = mean_ci([0.5, 1.0], bounds=(0.0, 1.0))
    assert str(wide).startswith("0.750 [") and wide.low == 0.0 and wide.high == 1.0
    assert "no interval" in str(mean_ci([0.5], bounds=(0.0, 1.0)))
    assert Estimate.from_dict(wide.as_dict(), (0.0, 1.0)).high == 1.0
    assert math.isnan(mean_ci([]).mean)


def test_coinciding_curves_are_reported():
    curve = [{"iteration": i, "env_steps": i, "eval/success_rate": v} for i, v in enumerate((0.5, 0.75))]
    summary = {
        "algos": ["grpo", "orsd"],
        "runs": {"grpo-seed0": {"algo": "grpo", "curve": curve}, "orsd-seed0": {"algo": "orsd", "curve": curve}},
    }
    assert coinciding_arms(summary) == [("grpo", "orsd")]
