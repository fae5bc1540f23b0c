"""``orsd-gym demo``: the embedded main job that ``make demo`` runs.

Plain GRPO vs ORSD on generated ALFWorld tasks with the embedded SmolLM2-135M on a CPU (the
shipped ``demo`` config), then the report: ``reports/demo/report.md`` with plots.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orsd_gym import configio
from orsd_gym.cli.compare import CONTINUE_HINT, run_comparison
from orsd_gym.cli.options import add_allow_change, add_json, add_no_live, add_threads, threads_override
from orsd_gym.train.config import Config

__all__ = ["CONTINUE_HINT", "add_arguments", "run"]  # CONTINUE_HINT: what `orsd-gym` prints after Ctrl-C


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seeds", type=int, default=2, help="seeds per algorithm")
    parser.add_argument("--out", default="reports/demo", help="report directory")
    parser.add_argument("--fresh", action="store_true", help="retrain runs already in the report directory")
    add_allow_change(parser, "runs already in the report directory continue")
    add_no_live(parser)
    add_threads(parser)
    add_json(parser, "the results (results.json)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides of the demo config")


def run(args: argparse.Namespace) -> int:
    base = configio.load(Config, "demo", [*args.overrides, *threads_override(args)])
    comparison = argparse.Namespace(**{**vars(args), "algos": "grpo,orsd", "seed_list": None})
    run_comparison(base, comparison, Path(args.out))
    return 0
