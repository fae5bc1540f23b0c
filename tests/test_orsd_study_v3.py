"""Study v3's driver (benchmarks/studies/orsd_study_v3.py): its stop rule and verdicts, and the
whole study at a tiny shape (tiny random model, synthetic WebShop, 1 iteration, 2 goals):
gate, task-plan check, interim look, resume, probe and report."""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orsd_gym import configio
from orsd_gym.errors import UsageError
from orsd_gym.train.config import Config

STUDIES = Path(__file__).resolve().parents[1] / "benchmarks" / "studies"
TINY = [
    "model.name=tiny-random",
    "warm_start.episodes=2",
    "warm_start.epochs=1",
    "eval.num_tasks=2",
    "rollout.max_new_tokens=16",
    "rollout.tasks_per_iteration=1",
    "rollout.group_size=2",
    "train.threads=1",
]
#: The comparison's own size (the gate runs no RL iteration).
SHORT = ["train.iterations=1", "eval.every=1"]


@pytest.fixture
def v3(monkeypatch):
    """benchmarks/studies/orsd_study_v3.py as a module (it imports the scripts beside it)."""
    monkeypatch.syspath_prepend(str(STUDIES))
    return importlib.import_module("orsd_study_v3")


def test_the_interim_look_stops_an_arm_whose_mean_paired_difference_is_not_above_grpos(v3):
    assert v3.futile([0.0, 0.0, 0.0]) and v3.futile([0.1, -0.2, 0.05])
    assert not v3.futile([0.01, -0.005, 0.0])


def test_the_study_refuses_a_product_set_that_is_not_there(v3, tmp_path):
    with pytest.raises(UsageError, match="official small product set is not there"):
        v3.data_overrides(str(tmp_path))
    assert v3.data_overrides("embedded") == []


def test_a_verdict_says_what_the_interval_and_the_mdd_allow(v3):
    power = {"mdd": 0.05}
    assert v3.verdict({"mean": 0.1, "low": 0.02, "high": 0.18, "n": 6}, power).startswith("beats grpo")
    assert v3.verdict({"mean": -0.1, "low": -0.2, "high": -0.01, "n": 6}, power).startswith("worse than grpo")
    unresolved = v3.verdict({"mean": 0.01, "low": -0.03, "high": 0.05, "n": 6}, power)
    assert "[-0.030, +0.050] are excluded" in unresolved and "0.050 or more is detected" in unresolved


def test_the_report_lists_the_plans_deviations(v3, tmp_path):
    assert "No PLAN.md" in v3.plan_deviations(tmp_path)[0]
    (tmp_path / "PLAN.md").write_text("# Plan\n\n## Stop rules\n- one\n\n## Deviations\n")
    assert v3.plan_deviations(tmp_path) == ["None: the study ran as PLAN.md says."]
    (tmp_path / "PLAN.md").write_text("# Plan\n\n## Deviations\n\n1. Moved.\n   Why.\n\n## Later\nother\n")
    assert v3.plan_deviations(tmp_path) == ["1. Moved.", "   Why."]


def test_probe_differences_pair_each_arms_change_with_grpos_on_the_same_seed(v3):
    probes = {"grpo": {0: {"change": 0.1}, 1: {"change": 0.3}}, "orsd:expert": {1: {"change": 0.5}, 0: {"change": 0.4}}}
    summary = v3.probe_summary(probes)
    assert summary["arms"]["orsd:expert"]["changes"] == [0.4, 0.5]
    assert summary["paired"]["orsd:expert - grpo"]["diffs"] == pytest.approx([0.3, 0.2])


def _run(out: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(STUDIES / "orsd_study_v3.py"), *args, "--out", str(out), "--gate-tasks", "2"]
    command += ["--data-dir", "embedded"]
    return subprocess.run(command, capture_output=True, text=True)


def _digests(out: Path) -> dict[str, str]:
    files = [*out.glob("runs/*/metrics.jsonl"), *out.glob("runs/*/probe.json"), out / "interim.json"]
    return {str(path): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


@pytest.mark.slow
def test_the_study_gates_checks_its_plan_stops_for_futility_resumes_and_reports(tmp_path, v3):
    pytest.importorskip("spacy")
    out = tmp_path / "out"
    compare = ["compare", "--seeds", "3", "--interim-after", "2", "--probe-tasks", "1", *TINY, *SHORT]
    refused = _run(out, *compare)
    assert refused.returncode == 2 and "run stage 1 first" in refused.stderr
    gated = _run(out, "gate", "--runs", str(tmp_path / "runs"), *TINY)
    assert gated.returncode == 0, gated.stderr
    (out / "PLAN.md").write_text("# Plan\n\n## Deviations\n\n1. A deviation, with its reason.\n")
    done = _run(out, *compare)
    assert done.returncode == 0, done.stderr

    # The task plan: evaluation after the gate's goals, away from demonstrations and training.
    gate = json.loads((out / "gate" / "gate.json").read_text())
    gate_goals = {f"orsd_gym/WebShop-v0:{key}" for key in gate["cells"]["rubric-48@2/system/seed0"]["success"]["none"]}
    plans = [json.loads(path.read_text())["keys"] for path in out.glob("runs/*/task_plan.json")]
    evaluation = {key for plan in plans for key in plan["eval"]}
    assert len(evaluation) == 2 and len(gate_goals) == 2 and not evaluation & gate_goals
    assert not evaluation & {key for plan in plans for key in [*plan["train"], *plan["warm_start"]]}
    # Every seed trains from the gated warm start: its demonstrations are seed 0's, in every plan.
    assert len({tuple(plan["warm_start"]) for plan in plans}) == 1
    study = json.loads((out / "study.json").read_text())
    assert study["task_plan"]["eval_and_gate"] == 0 and study["task_plan"]["gate_tasks"] == 2
    # The check refuses a plan whose evaluation is the gate's goals.
    overlapping = configio.load(Config, "webshop_cpu", [*v3.study_overrides(out, 0, TINY), *SHORT])
    with pytest.raises(UsageError, match="not disjoint: eval_and_gate 2"):
        v3.task_overlaps(overlapping, [0], out, gate)

    # The interim look after 2 seeds: an arm at or below grpo stops, the others run seed 2.
    interim = json.loads((out / "interim.json").read_text())
    assert interim["seeds"] == [0, 1]
    for arm, decision in interim["arms"].items():
        assert decision["stopped"] == (sum(decision["diffs"]) / 2 <= 0)
        slug = arm.replace(":", "-")
        assert (out / "runs" / f"{slug}-seed2").exists() == (not decision["stopped"])
    assert (out / "runs" / "grpo-seed2" / "probe.json").is_file()
    assert all((run / "probe.json").is_file() for run in out.glob("runs/*"))

    report = (out / "report.md").read_text()
    for arm in ("gigpo", "orsd:expert"):
        line = next(line for line in report.splitlines() if line.startswith(f"- {arm} - grpo: "))
        assert " [" in line and "MDD" in line and "per seed" in line
        assert f"- {arm}: " in report.split("### Distillation probe")[1]
    gate_section = report.split("### Gate")[1].split("###")[0]
    assert [f"- seed {seed}: warm start rubric-48@2/system/seed0" in gate_section for seed in range(3)] == [True] * 3
    assert "### Mixed-group shares" in report and "### Interim look" in report
    assert report.split("### Deviations from the plan (PLAN.md)")[1].strip() == "1. A deviation, with its reason."

    # Run again: it resumes, trains nothing, and the interim decision stands.
    before = _digests(out)
    again = _run(out, *compare)
    assert again.returncode == 0, again.stderr
    assert _digests(out) == before
    stages = [entry["stage"] for entry in json.loads((out / "study.json").read_text())["invocations"]]
    assert stages == ["gate", "compare", "compare"]
