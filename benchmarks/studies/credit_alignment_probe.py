"""Where does a rubric move credit? Expert vs shuffled rubrics, by placement, on the same rollouts.

After the study's warm start (SmolLM2-135M cloning the planner on generated ALFWorld), plays
episodes on training tasks with the planner's next action in every info, then replays the same
sampled tokens with, per group of attempts at one task:

* ``expert``: the expert bundle written from the task's own plan (`expert_bundle_for`);
* ``shuffled``: the expert bundle of another task of the batch;
* ``plan``: the task's own first plan actions quoted verbatim (``- go to sinkbasin 1`` ...);

each in the system message, the first user message, or restated next to every model turn
("turn"). Credit alignment (`orsd_gym.algos.orsd.alignment`) says whether delta rises on the
tokens of actions that agree with the expert's next action more than on the others; mean
|delta| says how big it is. Both sides of delta come from full forward passes (``rescore``).

    python benchmarks/studies/credit_alignment_probe.py --episodes 24 --json PATH [KEY=VALUE overrides]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from orsd_gym import configio
from orsd_gym.algos.orsd.alignment import credit_alignment
from orsd_gym.algos.orsd.expert_rubric import expert_bundle_for
from orsd_gym.algos.orsd.replay import replay_deltas
from orsd_gym.algos.orsd.rubrics import format_rubric
from orsd_gym.policies.models import load_policy
from orsd_gym.probes import probes_for
from orsd_gym.rollout.collector import collect
from orsd_gym.train.callbacks import demonstration_edit
from orsd_gym.train.config import Config
from orsd_gym.train.envs import close_envs, make_envs
from orsd_gym.train.plan import build_task_plan
from orsd_gym.train.warm_start import ensure_warm_start

sys.path.insert(0, str(Path(__file__).parent))
from orsd_study import STUDY  # noqa: E402  (the study's env, model and warm start)

PLACEMENTS = ("system", "user", "turn")
SOURCES = ("expert", "shuffled", "plan")


def rubrics_for(trajectories, source: str, max_criteria: int) -> list[str]:
    """One rubric per trajectory: its group's own, another group's, or the plan quoted."""
    own = {t.group_id: expert_bundle_for(t, max_criteria) for t in trajectories}
    groups = sorted(own)
    if source == "expert":
        return [format_rubric(own[t.group_id]) for t in trajectories]
    if source == "shuffled":
        lent = {g: own[groups[(i + 1) % len(groups)]] for i, g in enumerate(groups)}
        return [format_rubric(lent[t.group_id]) for t in trajectories]
    return [format_rubric(t.infos[0]["expert_actions"][:max_criteria]) for t in trajectories]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="training tasks (groups)")
    parser.add_argument("--group-size", type=int, default=3)
    parser.add_argument("--max-criteria", type=int, default=4)
    parser.add_argument("--warm-start", default="runs/credit_probe/warm_start.safetensors")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="write the table here")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = configio.load(Config, "demo", [*STUDY, *args.overrides])
    plan = build_task_plan(config)
    policy = load_policy(config.model.name)
    edit = demonstration_edit(probes_for(config), config, len(plan.warm_start))
    ensure_warm_start(config, plan, policy, Path(args.warm_start), edit)
    tasks = [task.spec for iteration in plan.train for task in iteration][: args.tasks]
    envs = make_envs(config.env, configio.merge(plan.train_kwargs, {"expert": True}), 6)
    started = time.perf_counter()
    try:
        trajectories = collect(
            envs,
            policy,
            tasks,
            group_size=args.group_size,
            sampling=config.rollout.sampling(1.0, 0),
            options=config.rollout,
        )
    finally:
        close_envs(envs)
    rows = []
    for source in SOURCES:
        rubrics = rubrics_for(trajectories, source, args.max_criteria)
        for placement in PLACEMENTS:
            deltas = replay_deltas(policy, trajectories, rubrics, placement=placement, baseline="rescore")
            found = credit_alignment(trajectories, deltas)
            rows.append({"source": source, "placement": placement, **found})
            print(
                f"{source:9s} {placement:7s} alignment {found['alignment'] or float('nan'):+.4f}  "
                f"agree {found['agree_mean'] or float('nan'):+.4f}  other {found['other_mean'] or float('nan'):+.4f}  "
                f"|delta| {found['abs_mean'] or float('nan'):.4f}",
                flush=True,
            )
    summary = {
        "episodes": len(trajectories),
        "success_rate": float(np.mean([t.success for t in trajectories])),
        "seconds": time.perf_counter() - started,
        "rows": rows,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
