"""``orsd-gym inspect``: a trajectory's token-level credit from a run's audit."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml
from rich.console import Console

from orsd_gym.errors import UsageError
from orsd_gym.experiments.credit import load_credit, render_html, render_terminal
from orsd_gym.policies.models import load_tokenizer
from orsd_gym.writable import writable_file, write_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a training run directory (train.output_dir)")
    parser.add_argument("--iteration", type=int, default=1, help="training iteration (1-based, as in metrics.jsonl)")
    parser.add_argument("--trajectory", type=int, default=0, help="index of the trajectory within the iteration")
    parser.add_argument("--html", help="also write a standalone HTML file here")
    parser.add_argument(
        "--colour",
        help=(
            "the per-token series that colours the model's tokens (default: the algorithm's own, ORSD's "
            "orsd_delta or GiGPO's gigpo_step_advantage; 'advantages': the advantage itself)"
        ),
    )


def run(args: argparse.Namespace) -> int:
    if args.html:
        writable_file(args.html, "--html")  # before loading and scoring, not after
    config_path = Path(args.run_dir) / "config.yaml"
    if not config_path.is_file():
        raise UsageError(f"{args.run_dir} is not a run directory (no config.yaml)")
    model_name = yaml.safe_load(config_path.read_text())["model"]["name"]
    view = load_credit(args.run_dir, args.iteration, args.trajectory, load_tokenizer(model_name), args.colour)
    render_terminal(view, Console())
    if args.html:
        write_file(args.html, render_html(view), "the credit heatmap")
        print(f"wrote {args.html}")
    return 0
