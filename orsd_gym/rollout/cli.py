"""``orsd-gym rollout``: play a model on an env and write Trajectories as JSONL, with a summary."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="env id, e.g. orsd_gym/GuessNumber-v0 (see `orsd-gym envs`)")
    parser.add_argument("--model", default="smollm2-135m", help="registry name (smollm2-135m, tiny-random), path or hub id")
    parser.add_argument("--tasks", type=int, default=4, help="number of tasks (reset seeds first-seed..first-seed+N-1)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--group", type=int, default=2, help="episodes per task (a GRPO group)")
    parser.add_argument("--out", type=Path, required=True, help="output .jsonl")
    parser.add_argument("--max-turns", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-episode-tokens", type=int, default=4096)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--layout", choices=("sequence", "per_step"), default="sequence")
    parser.add_argument("--action-format", choices=("tag", "last_line"), default="tag")
    parser.add_argument("--num-envs", type=int, default=None, help="episodes played side by side (default min(16, all))")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import gymnasium as gym
    from rich.console import Console
    from rich.table import Table

    from orsd_gym.cli import CLIError
    from orsd_gym.policies.base import SamplingParams
    from orsd_gym.policies.models import ModelNotFoundError, load_policy
    from orsd_gym.rollout.collector import collect
    from orsd_gym.rollout.trajectory import save_jsonl

    if args.env not in gym.registry:
        raise CLIError(f"unknown env {args.env!r}; `orsd-gym envs` lists the registered ones")
    if args.tasks < 1 or args.group < 1:
        raise CLIError("--tasks and --group must be >= 1")
    try:
        policy = load_policy(args.model, device=args.device, seed=args.seed)
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p)
        trajectories = collect(
            args.env, policy, list(range(args.first_seed, args.first_seed + args.tasks)), group_size=args.group,
            sampling=sampling, max_turns=args.max_turns, max_episode_tokens=args.max_episode_tokens, seed=args.seed,
            progress=not args.quiet, layout=args.layout, action_format=args.action_format, num_envs=args.num_envs,
        )
    except (ModelNotFoundError, ValueError) as error:
        raise CLIError(str(error)) from error
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_jsonl(trajectories, args.out)

    # Per-step layout: one Trajectory per step; its first step stands for the episode.
    episodes = [t for t in trajectories if t.extra.get("step", 0) == 0]
    n = max(len(episodes), 1)
    turns = sum(t.num_turns for t in episodes)
    table = Table(title=f"{args.env} x {args.model}: {len(episodes)} episodes")
    for column in ("success rate", "mean return", "mean turns", "mean tokens", "trained tokens", "invalid rate", "truncated"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{sum(t.success for t in episodes) / n:.3f}",
        f"{sum(t.episode_return for t in episodes) / n:.3f}",
        f"{turns / n:.2f}",
        f"{sum(len(t.token_ids) for t in trajectories) / n:.0f}",
        f"{sum(sum(t.loss_mask) for t in trajectories) / n:.0f}",
        f"{sum(not v for t in episodes for v in t.format_valid) / max(turns, 1):.3f}",
        f"{sum(t.truncated for t in episodes)}",
    )
    console = Console()
    console.print(table)
    console.print(f"wrote {len(trajectories)} trajectories to {args.out}")
    return 0
