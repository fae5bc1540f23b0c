"""What the side-by-side speed benchmarks share: their common options, alternating runs of
each mode (so a noisy machine slows every mode alike; the best run of each is compared) and
the ``--json`` record."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

import torch

from orsd_gym.policies.models import load_policy


def parser(description: str, repeats: int) -> argparse.ArgumentParser:
    """An argument parser with ``--model``, ``--threads``, ``--repeats`` and ``--json``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=repeats, help="alternating runs per mode (the best is kept)")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    return parser


def load(args: argparse.Namespace):
    """The benchmark's policy, on ``--threads`` threads."""
    torch.set_num_threads(args.threads)
    return load_policy(args.model)


def alternate(modes: Sequence[str], run: Callable[[str], Any], repeats: int) -> dict[str, list[Any]]:
    """``run(mode)`` for every mode in turn, ``repeats`` times; each mode's results in order."""
    results: dict[str, list[Any]] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode in modes:
            results[mode].append(run(mode))
    return results


def write_record(args: argparse.Namespace, record: dict[str, Any]) -> None:
    """Write ``record`` (with the command's arguments) to ``--json``, if given."""
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), **record}, handle, indent=1)
