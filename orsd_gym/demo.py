"""``orsd-gym demo``: the embedded main job that ``make demo`` runs.

For now a smoke run of the ALFWorld engine: play generated tasks of every type with the
planner's expert actions and print a table (later replaced by the GRPO-vs-ORSD comparison).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=6, help="generated ALFWorld tasks to play")
    parser.add_argument("--seed", type=int, default=0, help="generator seed")


def run(args: argparse.Namespace) -> int:
    import gymnasium as gym
    from rich.console import Console
    from rich.table import Table

    import orsd_gym  # noqa: F401
    from orsd_gym.cli import CLIError
    from orsd_gym.envs.alfworld.expert import play_expert

    if args.episodes < 1:
        raise CLIError(f"--episodes must be >= 1, got {args.episodes}")
    env = gym.make(
        "orsd_gym/ALFWorld-v0", expert=True, generator={"num_tasks": args.episodes, "seed": args.seed}
    )
    table = Table(title="ALFWorld (generated tasks, real engine): planner expert")
    for column in ("task", "task type", "goal", "steps", "won", "time (s)"):
        table.add_column(column)
    console = Console()
    wins = 0
    with console.status("generating and playing tasks (first run checks each with the planner)..."):
        for task_id in range(args.episodes):
            episode = play_expert(env, task_id)
            wins += episode.won
            table.add_row(str(task_id), episode.task_type, episode.goal, str(episode.steps),
                          "yes" if episode.won else "no", f"{episode.seconds:.2f}")
    env.close()
    console.print(table)
    console.print(f"won {wins}/{args.episodes}")
    return 0 if wins == args.episodes else 1
