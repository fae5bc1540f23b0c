"""``orsd-gym rollout``: play a model on an env and write Trajectories as JSONL, with a summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

import orsd_gym  # noqa: F401  (registers the built-in envs)
from orsd_gym import progress
from orsd_gym.cli.options import add_threads, apply_threads
from orsd_gym.envs.lookup import env_creator
from orsd_gym.errors import UsageError
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.rollout.actions import PARSERS
from orsd_gym.rollout.collector import EnvSetup, collect
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.rollout.stats import rollout_stats
from orsd_gym.rollout.trajectory import episodes_of, save_jsonl
from orsd_gym.writable import writable_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", required=True, help="env id, e.g. orsd_gym/GuessNumber-v0 (see `orsd-gym envs`), or module:env-id"
    )
    parser.add_argument(
        "--model", default="smollm2-135m", help="registry name (smollm2-135m, tiny-random), path or hub id"
    )
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
    parser.add_argument("--action-format", choices=sorted(PARSERS), default="tag")
    parser.add_argument(
        "--num-envs", type=int, default=None, help="episodes played side by side (default min(16, all))"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bar (progress lines still go to stderr)")
    add_threads(parser)


def run(args: argparse.Namespace) -> int:
    env_creator(args.env)  # an unknown id fails here, with the closest registered ones
    apply_threads(args)
    if args.tasks < 1 or args.group < 1:
        raise UsageError("--tasks and --group must be >= 1")
    writable_file(args.out, "--out")  # before playing, not after
    options = RolloutOptions(
        layout=args.layout,
        action_format=args.action_format,
        max_turns=args.max_turns,
        max_episode_tokens=args.max_episode_tokens,
    )
    sampling = SamplingParams(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed
    )
    with progress.phase(f"rollout of {args.tasks * args.group} episodes"):
        progress.step(f"loading {args.model}")
        policy = load_policy(args.model, device=args.device, settings=PolicySettings(seed=args.seed))
        progress.step("playing")
        trajectories = collect(
            EnvSetup(args.env, num_envs=args.num_envs, progress=not args.quiet),
            policy,
            list(range(args.first_seed, args.first_seed + args.tasks)),
            group_size=args.group,
            sampling=sampling,
            options=options,
        )
    save_jsonl(trajectories, args.out)
    console = Console()
    console.print(summary_table(f"{args.env} x {args.model}", trajectories))
    console.print(f"wrote {len(trajectories)} trajectories to {args.out}")
    return 0


def summary_table(title: str, trajectories: list) -> Table:
    """Per-episode statistics of a rollout (token counts per episode, over its samples)."""
    stats = rollout_stats(trajectories)
    episodes = max(len(episodes_of(trajectories)), 1)
    table = Table(title=f"{title}: {episodes} episodes")
    for column in (
        "success rate",
        "mean return",
        "mean turns",
        "mean tokens",
        "trained tokens",
        "invalid rate",
        "format errors",
        "truncated",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        f"{stats['success_rate']:.3f}",
        f"{stats['mean_return']:.3f}",
        f"{stats['episode_len']:.2f}",
        f"{sum(len(t.token_ids) for t in trajectories) / episodes:.0f}",
        f"{stats['tokens_generated'] / episodes:.0f}",
        f"{stats['invalid_action_rate']:.3f}",
        f"{stats['format_error_rate']:.3f}",
        f"{stats['truncated_frac']:.3f}",
    )
    return table
