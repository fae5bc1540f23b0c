"""``orsd-gym eval``: evaluate a checkpoint's policy on its run's held-out tasks."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from orsd_gym import configio, jsonio, progress
from orsd_gym.cli.options import add_json, add_threads, apply_threads
from orsd_gym.errors import UsageError
from orsd_gym.rollout.trajectory import save_jsonl
from orsd_gym.train.checkpoint import latest_good_checkpoint, load_checkpoint
from orsd_gym.train.config import Config, resolve_algo
from orsd_gym.train.evaluate import evaluate_checkpoint
from orsd_gym.train.validation import validate_settings
from orsd_gym.writable import writable_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint", required=True, help="a checkpoint directory (…/checkpoints/iter_N) or a run directory"
    )
    parser.add_argument("--env", help="env id (default: the one the run trained on)")
    parser.add_argument("--tasks", type=int, help="number of held-out tasks (default: the run's eval.num_tasks)")
    parser.add_argument("--out", help="write the trajectories to this JSONL file")
    add_threads(parser)
    add_json(parser, "the metrics")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")


def run(args: argparse.Namespace) -> int:
    apply_threads(args)
    if args.out:
        writable_file(args.out, "--out")  # before evaluating, not after
    path = Path(args.checkpoint)
    checkpoint = (
        load_checkpoint(path) if (path / "manifest.json").exists() else latest_good_checkpoint(path / "checkpoints")
    )
    if checkpoint is None:
        raise UsageError(
            f"no usable checkpoint under {path} (expected a checkpoint dir or a run dir with checkpoints/)"
        )
    data = checkpoint.state["config"]
    extra = ([f"env.id={args.env}"] if args.env else []) + ([f"eval.num_tasks={args.tasks}"] if args.tasks else [])
    for override in [*args.overrides, *extra]:
        configio.apply_override(data, override)
    config = configio.from_dict(Config, data)
    validate_settings(config, resolve_algo(config))
    with progress.phase(f"evaluation of checkpoint {checkpoint.iteration}"):
        trajectories, result = evaluate_checkpoint(config, checkpoint)
    if args.out:
        save_jsonl(trajectories, args.out)
    if args.json:
        print(jsonio.dumps(result))
        return 0
    table = Table(title=f"{config.env.id}: checkpoint iteration {checkpoint.iteration}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, f"{value:.3f}")
    Console().print(table)
    return 0
