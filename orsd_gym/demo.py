"""``orsd-gym demo``: the embedded main job that ``make demo`` runs."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=6, help="generated ALFWorld tasks to play")


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("the demo lands with the ALFWorld env")
