"""The teacher test as a gate: does the policy play better with the expert's rubric in its
context than with none, and than with another task's rubric? Measured before any ORSD study,
on the study's rooms and held-out tasks, for each starting policy a study could use.

A setting (warm start x placement of the rubric) passes when, paired over the same held-out
tasks (greedy decoding, so each task is one win or loss per arm), the expert rubric beats both
no rubric and a shuffled rubric with 95% intervals above 0. ORSD distils the policy with the
rubric into the policy without it: where the teacher is no better, a study cannot show ORSD
moving behaviour, at any beta.

Settings (SmolLM2-135M-Instruct, the study's generated ALFWorld rooms, 24 held-out tasks):

* ``zero-shot``: the model as shipped;
* ``plain-N``: cloned on N expert demonstrations (the study's warm start is plain-12);
* ``rubric-N``: cloned on the same N demonstrations, half of them with their task's expert
  rubric in context (``warm_start.rubric_share=0.5``) in the placement under test, so the
  policy can learn that a rubric tells it what to do; plain-N is its control.

    python benchmarks/studies/teacher_gate.py --settings zero-shot,plain-12,plain-48,rubric-48 \\
        --out benchmarks/results/teacher_gate

Writes ``gate.json`` (every setting, its per-task outcomes, the commit and command) after each
setting, and skips the settings it already holds, so an interrupted gate continues; and
``gate.md``, the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from orsd_study import EVAL_TASKS, STUDY

from orsd_gym import configio
from orsd_gym.cli import run_reporting_errors
from orsd_gym.train.config import Config
from orsd_gym.train.trainer import Trainer

PLACEMENTS = ("system", "user")


def setting_overrides(setting: str, placement: str, runs: Path, eval_tasks: int = EVAL_TASKS) -> list[str]:
    """The config of one gate cell: the study's rooms, evaluation only (no RL iteration)."""
    kind, _, size = setting.partition("-")
    cell = [
        *STUDY,
        f"eval.num_tasks={eval_tasks}",
        "algo.name=grpo",
        "train.iterations=0",
        "eval.env_kwargs={expert: reset}",  # the expert rubric is the planner's plan at reset
        "eval.teacher_test=expert",
        f"eval.teacher_placement={placement}",
        "eval.teacher_max_criteria=3",  # the study's ORSD arms' max_criteria
        "logging.live=false",
        f"train.output_dir={runs / f'{setting}-{placement}-{eval_tasks}'}",
    ]
    if kind == "zero":
        return [*cell, "warm_start.episodes=0"]
    if kind not in ("plain", "rubric") or not size.isdigit():
        raise SystemExit(f"unknown setting {setting!r}: use zero-shot, plain-N or rubric-N")
    share = 0.5 if kind == "rubric" else 0.0
    # A plain warm start does not depend on the placement: both placements test one policy.
    cache = f"{setting}-{placement}" if kind == "rubric" else setting
    return [
        *cell,
        f"warm_start.episodes={size}",
        f"warm_start.rubric_share={share}",
        f"warm_start.rubric_placement={placement}",
        "warm_start.rubric_max_criteria=3",
        f"warm_start.path={runs / 'warm_start' / cache}.safetensors",
    ]


def gate_cell(overrides: list[str]) -> dict:
    """Run the cell's evaluation and teacher test; its ``teacher/*`` numbers and per-task record."""
    config = configio.load(Config, "demo", overrides)
    summary = Trainer(config, overwrite=True, live=False).run()
    record = json.loads((summary.output_dir / "teacher.jsonl").read_text().splitlines()[-1])
    metrics = {k: v for k, v in (summary.final_eval or {}).items() if k.startswith("teacher/")}
    passed = metrics["teacher/gain_low"] > 0 and metrics["teacher/gain_vs_other_low"] > 0
    return {"metrics": metrics, "passed": passed, "success": record["success"], "rubrics": record["rubrics"]}


def table(cells: dict) -> str:
    lines = [
        "| setting @ held-out tasks | placement | none | expert | other task's | expert - none [95% CI] "
        "| expert - other [95% CI] | gate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, cell in cells.items():
        m = cell["metrics"]
        gain = f"{m['teacher/gain']:+.3f} [{m['teacher/gain_low']:+.3f}, {m['teacher/gain_high']:+.3f}]"
        versus = (
            f"{m['teacher/gain_vs_other']:+.3f} [{m['teacher/gain_vs_other_low']:+.3f}, "
            f"{m['teacher/gain_vs_other_high']:+.3f}]"
        )
        setting, placement = name.rsplit("/", 1)
        setting = setting.replace("@", " @ ") + ("" if "@" in setting else f" @ {EVAL_TASKS}")
        lines.append(
            f"| {setting} | {placement} | {m['teacher/success_none']:.3f} | {m['teacher/success_own']:.3f} | "
            f"{m['teacher/success_other']:.3f} | {gain} | {versus} | {'pass' if cell['passed'] else 'fail'} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="zero-shot,plain-12,plain-48,rubric-48")
    parser.add_argument("--placements", default=",".join(PLACEMENTS))
    parser.add_argument("--out", default="benchmarks/results/teacher_gate")
    parser.add_argument("--runs", default="runs/teacher_gate", help="run directories and cached warm starts")
    parser.add_argument(
        "--eval-tasks", type=int, default=EVAL_TASKS, help="held-out tasks per cell (more: narrower intervals)"
    )
    args = parser.parse_args()
    out, runs = Path(args.out), Path(args.runs)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gate.json"
    gate = json.loads(path.read_text()) if path.is_file() else {"cells": {}, "runs": []}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    gate["runs"].append({"commit": commit, "command": " ".join(sys.argv), "started": time.strftime("%F %T")})
    for setting in args.settings.split(","):
        for placement in args.placements.split(","):
            tasks = "" if args.eval_tasks == EVAL_TASKS else f"@{args.eval_tasks}"
            name = f"{setting}{tasks}/{placement}"
            if name in gate["cells"]:
                continue
            started = time.perf_counter()
            cell = gate_cell(setting_overrides(setting, placement, runs, args.eval_tasks))
            gate["cells"][name] = {**cell, "commit": commit, "wall_seconds": time.perf_counter() - started}
            path.write_text(json.dumps(gate, indent=1))
            (out / "gate.md").write_text(table(gate["cells"]) + "\n")
            print(table({name: gate["cells"][name]}).splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(
        run_reporting_errors(
            "teacher_gate.py", main, "run the same command again to continue (finished cells are kept)"
        )
    )
