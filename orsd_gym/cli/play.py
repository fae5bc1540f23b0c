"""``orsd-gym play``: a person plays a registered env in the terminal."""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
from rich.console import Console

import orsd_gym  # noqa: F401  (registers the built-in envs)
from orsd_gym.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="env id, e.g. orsd_gym/ALFWorld-v0")
    parser.add_argument("--seed", type=int, default=0, help="task seed")
    parser.add_argument("--kwargs", default="{}", help='JSON constructor arguments, e.g. \'{"split": "generated"}\'')
    parser.add_argument("--max-shown", type=int, default=30, help="admissible actions shown per turn")


def run(args: argparse.Namespace) -> int:
    try:
        kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as error:
        raise UsageError(f"--kwargs is not valid JSON: {error}") from error
    try:
        env = gym.make(args.env, **kwargs)
    except gym.error.Error as error:
        raise UsageError(f"cannot make {args.env!r}: {error} (see `orsd-gym envs`)") from error
    try:
        play(env, args.seed, Console(), max_shown=args.max_shown)
    finally:
        env.close()
    return 0


def play(env: gym.Env, seed: int, console: Console, *, max_shown: int) -> None:
    """One episode typed by a person: observation, admissible actions, a prompt; "quit" ends it."""
    observation, info = env.reset(seed=seed)
    console.print(f"[bold]Task:[/bold] {info['task']}\n")
    total = 0.0
    while True:
        console.print(observation, highlight=False, markup=False)
        actions = info.get("admissible_actions") or []
        if actions:
            shown = ", ".join(actions[:max_shown]) + (" ..." if len(actions) > max_shown else "")
            console.print(f"[dim]admissible: {shown}[/dim]", highlight=False)
        try:
            action = console.input("[bold green]> [/bold green]")
        except EOFError:
            return
        if action.strip() in {"quit", "exit"}:
            return
        observation, reward, terminated, truncated, info = env.step(action)
        total += reward
        if not info["is_valid_action"]:
            console.print("[yellow](invalid action)[/yellow]")
        if terminated or truncated:
            console.print(observation, highlight=False, markup=False)
            console.print(f"[bold]{'won' if info['won'] else 'episode over'}[/bold] - return {total:.3f}")
            return
