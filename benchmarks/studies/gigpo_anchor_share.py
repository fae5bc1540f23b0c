"""How often do GiGPO's anchor states repeat? The share of turns in anchor groups of more than one turn.

GiGPO gives a turn a step advantage only where another turn of its task's group acted in the
same state (`orsd_gym.algos.gigpo`); on an env whose every state is new it is GRPO. This plays
``--iterations`` iterations' worth of a preset's training rollouts (its task plan, group size,
layout, sampling and seeds, as `orsd-gym train` plays them, without updating the policy between
them) from the preset's warm start (cloned once, cached under ``--out``) and counts, with
GiGPO's own grouping:

* the share of turns in an anchor group of more than one turn, of all turns and of the turns
  after the first (every attempt at a task starts from its one reset observation, so first
  turns are always anchored), with the state key the env gives GiGPO;
* which anchor groups hold turns of several attempts and which only come back to a state
  within one attempt;
* the same with two other keys, to show what the env's key changes: the observation text
  alone, and the observation with the admissible actions listed beside it (anchor groups
  whose turns saw different admissible actions are states the text alone conflates);
* GiGPO's own metrics on the batch under the preset's reward (`GiGPO.prepare`).

    nice -n 19 .venv/bin/python benchmarks/studies/gigpo_anchor_share.py --config demo \\
        --json benchmarks/results/gigpo/alfworld_generated.json
    nice -n 19 .venv/bin/python benchmarks/studies/gigpo_anchor_share.py --config webshop_cpu \\
        --json benchmarks/results/gigpo/webshop_cpu.json env.kwargs.data_dir=../shared/data/webshop
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orsd_gym.algos.base import make_algorithm
from orsd_gym.algos.gigpo import anchor_groups, turn_states
from orsd_gym.algos.grpo import episode_groups
from orsd_gym.envs.presentation import state_key_for
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.probes import probes_for
from orsd_gym.rollout.collector import collect
from orsd_gym.rollout.trajectory import Trajectory, save_jsonl
from orsd_gym.train.callbacks import demonstration_edit
from orsd_gym.train.config import load_config, resolve_algo
from orsd_gym.train.envs import close_envs, make_envs
from orsd_gym.train.plan import build_task_plan
from orsd_gym.train.seeds import ROLLOUT, iteration_seed
from orsd_gym.train.warm_start import ensure_warm_start

Key = Callable[[str, dict[str, Any]], str]


def with_admissible(observation: str, info: dict[str, Any]) -> str:
    """The observation and the admissible actions the policy was shown beside it."""
    return "\n".join([observation, *sorted(info.get("admissible_actions") or [])])


def play(config: Any, iterations: int, out: Path) -> tuple[list[Trajectory], Any, dict[str, float] | None]:
    """The plan's training rollouts of the first ``iterations`` iterations, from the warm start."""
    plan = build_task_plan(config, iterations)
    model = config.model
    policy = load_policy(
        model.name,
        dtype=model.dtype,
        lora=model.lora.settings(),
        settings=PolicySettings(
            seed=config.train.seed,
            token_budget=config.optim.micro_batch_tokens,
            gradient_checkpointing=model.gradient_checkpointing,
        ),
    )
    warm = None
    if config.warm_start.episodes > 0:
        edit = demonstration_edit(probes_for(config), config, len(plan.warm_start))
        warm = ensure_warm_start(config, plan, policy, out / "warm_start.safetensors", edit)
    rollout = config.rollout
    envs = make_envs(config.env, plan.train_kwargs, rollout.tasks_per_iteration * rollout.group_size)
    trajectories: list[Trajectory] = []
    try:
        for iteration in range(iterations):
            seed = iteration_seed(config.train.seed, iteration, ROLLOUT)
            played = collect(
                envs,
                policy,
                [task.spec for task in plan.train[iteration]],
                group_size=rollout.group_size,
                sampling=rollout.sampling(rollout.temperature, seed),
                options=rollout,
            )
            # Numbered apart from the earlier iterations' groups (after sampling, which their ids seed).
            groups, episodes = iteration * rollout.tasks_per_iteration, iteration * 10**6
            for trajectory in played:
                trajectory.group_id += groups
                trajectory.episode_id += episodes
            trajectories += played
    finally:
        close_envs(envs)
    return trajectories, policy, warm


def share(trajectories: list[Trajectory], key: Key) -> dict[str, Any]:
    """Turns, and how many are in anchor groups of more than one turn under ``key``."""
    counts = dict.fromkeys(("turns", "anchored", "later_turns", "later_anchored", "states"), 0)
    counts |= {"across_attempts_groups": 0, "within_attempt_only_groups": 0, "conflated_turns": 0}
    for episodes in episode_groups(trajectories).values():
        records = [trajectories[samples[0]] for samples in episodes]
        turns = [(a, t, info) for a, r in enumerate(records) for t, info in enumerate(r.infos[: r.num_turns])]
        states = [s for r in records for s in turn_states(r, key)]
        for members in anchor_groups(states).values():
            counts["states"] += 1
            later = sum(1 for m in members if turns[m][1] > 0)
            counts["turns"] += len(members)
            counts["later_turns"] += later
            if len(members) < 2:
                continue
            counts["anchored"] += len(members)
            counts["later_anchored"] += later
            attempts = {turns[m][0] for m in members}
            counts["across_attempts_groups" if len(attempts) > 1 else "within_attempt_only_groups"] += 1
            menus = {tuple(sorted(turns[m][2].get("admissible_actions") or [])) for m in members}
            counts["conflated_turns"] += len(members) if len(menus) > 1 else 0
    return {
        **counts,
        "anchored_turn_frac": counts["anchored"] / max(counts["turns"], 1),
        "later_anchored_turn_frac": counts["later_anchored"] / max(counts["later_turns"], 1),
        "mean_anchor_group_size": counts["turns"] / max(counts["states"], 1),
        "conflated_turn_frac": counts["conflated_turns"] / max(counts["turns"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="demo", help="a shipped config or a YAML path")
    parser.add_argument("--iterations", type=int, default=2, help="iterations' worth of rollouts to play")
    parser.add_argument(
        "--out", default=None, help="where the warm start is cached (default runs/gigpo_anchor_share/<config>)"
    )
    parser.add_argument("--json", default=None, help="write the figures here")
    parser.add_argument("--rollouts", default=None, help="also save the played trajectories here (JSONL)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="dotted config overrides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_config(args.config, ["algo.name=gigpo", *args.overrides])
    out = Path(args.out or f"runs/gigpo_anchor_share/{Path(args.config).stem}")
    started = time.perf_counter()
    trajectories, policy, warm = play(config, args.iterations, out)
    if args.rollouts:
        save_jsonl(trajectories, args.rollouts)
    env_id = trajectories[0].env_id
    keys: dict[str, Key] = {
        "env_key": state_key_for(env_id),
        "observation": lambda observation, info: observation,
        "observation_and_admissible": with_admissible,
    }
    batch = make_algorithm("gigpo", resolve_algo(config)).prepare(
        trajectories, policy, iteration=0, rng=np.random.default_rng(0)
    )
    episodes = [trajectories[s[0]] for g in episode_groups(trajectories).values() for s in g]
    record = {
        "config": args.config,
        "overrides": args.overrides,
        "env_id": env_id,
        "layout": config.rollout.layout,
        "iterations": args.iterations,
        "groups": len(episode_groups(trajectories)),
        "episodes": len(episodes),
        "success_rate": float(np.mean([e.success for e in episodes])),
        "mean_turns": float(np.mean([e.num_turns for e in episodes])),
        "warm_start": warm,
        "keys": {name: share(trajectories, key) for name, key in keys.items()},
        "gigpo_metrics": {
            k: v for k, v in batch.metrics.items() if k.startswith("gigpo/") or k == "zero_adv_group_frac"
        },
        "seconds": time.perf_counter() - started,
    }
    print(json.dumps(record, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
