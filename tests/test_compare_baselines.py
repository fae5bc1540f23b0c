"""Classic-RL baselines as arms of a comparison: same tasks, same env-step budget, one report."""

from __future__ import annotations

import json
import shutil

import pytest

from orsd_gym.experiments.compare import Arm, compare
from orsd_gym.train.config import load_config
from orsd_gym.train.metrics import read_metrics

pytest.importorskip("sb3_contrib")


def test_arms_name_baselines():
    assert Arm.parse("sb3:maskable_ppo").baseline == "maskable_ppo"
    assert Arm.parse("random").baseline == "random"
    assert Arm.parse("grpo").baseline is None


@pytest.mark.slow
def test_baselines_join_the_comparison_on_the_same_tasks_and_budget(tmp_path):
    base = load_config(
        None,
        [
            "model.name=tiny-random",
            "env.id=orsd_gym/GuessNumber-v0",
            "env.kwargs={high: 10}",
            "rollout.tasks_per_iteration=2",
            "rollout.group_size=2",
            "rollout.max_turns=3",
            "rollout.max_new_tokens=4",
            "rollout.action_format=last_line",
            "train.iterations=1",
            "eval.every=1",
            "eval.num_tasks=2",
            "train.threads=1",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    report = compare(base, ["random", "grpo", "sb3:maskable_ppo"], [0], tmp_path, live=False)
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["table"]) == {"grpo", "random", "sb3:maskable_ppo"}
    used = read_metrics(tmp_path / "runs" / "grpo-seed0" / "metrics.jsonl")[-1]["env_steps"]
    ppo = tmp_path / "runs" / "sb3-maskable_ppo-seed0"
    curve = read_metrics(ppo / "eval.jsonl")
    assert curve[0]["env_steps"] == 0 and curve[-1]["env_steps"] >= used  # SB3 finishes its last rollout
    assert json.loads((ppo / "result.json").read_text())["settings"]["total_env_steps"] == used
    plans = [
        json.loads((tmp_path / "runs" / run / "task_plan.json").read_text())["keys"]["eval"]
        for run in ("grpo-seed0", "random-seed0", "sb3-maskable_ppo-seed0")
    ]
    assert plans[0] == plans[1] == plans[2]  # the same held-out tasks
    assert "env steps/s" in report.read_text()
    # A comparison copied elsewhere without its weights (as one is committed) trains nothing again.
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    shutil.copytree(tmp_path, moved, ignore=shutil.ignore_patterns("checkpoints"))
    kept = {p: p.stat().st_mtime_ns for p in (moved / "runs").rglob("*") if p.is_file()}
    compare(base, ["random", "grpo", "sb3:maskable_ppo"], [0], moved, live=False)
    assert {p: p.stat().st_mtime_ns for p in (moved / "runs").rglob("*") if p.is_file()} == kept
