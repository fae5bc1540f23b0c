"""ORSD's effect with its controls: GRPO vs ORSD (self-written rubrics) vs ORSD with the expert's
rubric (positive control) vs ORSD with another task's rubric (negative control).

SmolLM2-135M on generated ALFWorld (pick_and_place_simple in 2-receptacle rooms with a
distractor, 8 steps: the warm-started model starts near half there, so there is room both
ways), warm-started by cloning the planner on training tasks (``--setting``: how many, and
whether with rubrics; shared by every arm of a seed), evaluated greedily on 24 distinct
held-out tasks (floor plans no training task uses) every ``eval.every`` iterations. The env
reports the planner's next action at every step (``expert: true``), which the expert and
shuffled arms read at reset and which gives every ORSD arm its credit alignment. ORSD's
correction is normalised per group (``beta`` = its share of a typical advantage), and bounded
per token in ``rubric-48``. Every run measures ORSD's chain: the teacher test on the held-out
tasks at each evaluation (the expert's rubric, another task's, none) and the outcome's and
correction's gradient at each update; the report says which link holds. Run it only on a
setting that passes `teacher_gate.py`.

    python benchmarks/studies/orsd_study.py --setting rubric-48 --seeds 3 \\
        --out benchmarks/results/orsd_study_v2 [KEY=VALUE ...]
    python benchmarks/studies/orsd_study.py --arms grpo,orsd:expert@beta=0.1,orsd:shuffled@beta=0.1 ...  # a beta sweep

Writes the comparison report (report.md, results.json, curves) into ``--out``, with
``study.json``: the commit, the command, the arms and the wall time. ``--report-only`` trains
nothing: it writes the report of the runs in ``--out`` that have finished (the interim report of
a study that spans sessions) and names the runs it leaves out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from orsd_gym import configio
from orsd_gym.cli import run_reporting_errors
from orsd_gym.cli.options import add_allow_change, allowed_changes
from orsd_gym.experiments.compare import compare, report_finished
from orsd_gym.experiments.report import print_summary
from orsd_gym.train.config import Config

ARMS = ["grpo", "orsd", "orsd:expert", "orsd:shuffled"]
#: Distinct held-out tasks every evaluation plays (the rooms have 96).
EVAL_TASKS = 24
STUDY = [
    "env.kwargs.task_types=[pick_and_place_simple]",
    "env.kwargs.generator={num_tasks: 96, max_receptacles: 2, num_distractors: 1}",
    "env.kwargs.expert=true",
    "env.max_episode_steps=8",
    # Evaluation reads the planner's plan at reset only: the teacher test's expert rubrics.
    "eval.env_kwargs={expert: reset}",
    "probes.teacher.test=expert",
    "probes.teacher.max_criteria=3",  # as the ORSD arms' max_criteria
    "probes.gradient_share.every=1",
    "rollout.max_turns=8",
    "rollout.tasks_per_iteration=4",
    "rollout.group_size=4",
    f"eval.num_tasks={EVAL_TASKS}",
    "eval.every=1",
    "train.iterations=4",
    "warm_start.episodes=12",
    "algo.per_algo.orsd={num_bundles: 2, max_criteria: 3, proposal_max_new_tokens: 64, "
    "beta: 0.05, delta_scale: normalized}",  # beta study: above 0.05 the correction's gradient swamps GRPO's
    "logging.tensorboard=false",
    "train.keep_checkpoints=1",  # each checkpoint holds weights and AdamW state (~1.6 GB)
    # The memory settings the study's runs were trained with (before the demo's leaner ones).
    "model.verifier_dtype=null",
    "model.inference_dtype=null",
    "optim.max_memory_gb=4",
    # Its RL runs drew from every training room, the warm start's demonstration rooms included.
    "warm_start.disjoint_from_training=false",
]
#: Starting policies a study can use, each on top of `STUDY` (`teacher_gate.py` names them alike).
#: ``plain-12`` is the first study's: no warm start of it passes the gate. ``rubric-48`` is the
#: first to pass it (96 held-out tasks, rubric in the system prompt;
#: benchmarks/results/teacher_gate): 48 demonstrations, half with their expert rubric in the
#: system prompt. Its ORSD arms put the rubric where the gate did and bound the correction, so
#: that the outcome stays in charge of every token's sign.
SETTINGS = {
    "plain-12": [],
    "rubric-48": [
        "warm_start.episodes=48",
        "probes.rubric_demonstrations.share=0.5",
        "probes.rubric_demonstrations.placement=system",
        "probes.rubric_demonstrations.max_criteria=3",
        "probes.teacher.placement=system",
        "algo.per_algo.orsd={num_bundles: 2, max_criteria: 3, proposal_max_new_tokens: 64, rubric_placement: system, "
        "beta: 0.5, delta_scale: bounded, correction_bound: 0.5}",
        "train.iterations=6",
        "eval.every=2",
    ],
}


@dataclass(frozen=True)
class Design:
    """What a study fixes before its arms differ: the preset its runs start from, its own
    settings on top of it, and the starting policies it can use (`teacher_gate.py` gates them
    under the same preset and settings)."""

    preset: str
    study: Sequence[str]
    settings: Mapping[str, Sequence[str]]


#: This script's study (v2: generated ALFWorld).
V2 = Design("demo", STUDY, SETTINGS)


def head_commit() -> str:
    """The commit the runs are trained at (taken before: the tree may move on during hours of runs)."""
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


def write_study_record(out: Path, record: Mapping[str, Any], also: str | None = None) -> None:
    """``study.json`` in ``out`` (and at ``also``): the commit, the command, what ran."""
    for path in [out / "study.json", *([Path(also)] if also else [])]:
        path.write_text(json.dumps(record, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    parser.add_argument("--seed-list", help="these seeds, in this order (e.g. 2,0,1), instead of --seeds")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="rubric-48", help="the starting policy")
    parser.add_argument("--out", default="benchmarks/results/orsd_study")
    parser.add_argument("--json", help="also write study.json here")
    parser.add_argument("--report-only", action="store_true", help="report the finished runs in --out; train nothing")
    add_allow_change(parser, "runs already in --out continue")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    out = Path(args.out)
    overrides = [*V2.study, *V2.settings[args.setting], *args.overrides]
    base = configio.load(Config, V2.preset, [*overrides, "logging.live=false"])
    commit = head_commit()
    started = time.perf_counter()
    seeds = [int(seed) for seed in args.seed_list.split(",")] if args.seed_list else list(range(args.seeds))
    if args.report_only:
        report, left_out = report_finished(base, args.arms.split(","), seeds, out, allow_changes=allowed_changes(args))
        print(f"{report}: the finished runs; not finished: {', '.join(left_out) or 'none'}")
        return 0
    report = compare(base, args.arms.split(","), seeds, out, live=False, allow_changes=allowed_changes(args))
    record = {
        "commit": commit,
        "command": " ".join(sys.argv),
        "arms": args.arms.split(","),
        "seeds": seeds,
        "setting": args.setting,
        "overrides": overrides,
        "wall_seconds": time.perf_counter() - started,
    }
    write_study_record(out, record, args.json)
    print_summary(report, Console())
    return 0


if __name__ == "__main__":
    sys.exit(
        run_reporting_errors("orsd_study.py", main, "run the same command again to continue (finished runs are reused)")
    )
