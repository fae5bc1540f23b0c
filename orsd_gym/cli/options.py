"""Options several commands share: ``--threads``, ``--json``, ``--no-live``, ``--allow-change``."""

from __future__ import annotations

import argparse

import torch

from orsd_gym.probes import probes_for
from orsd_gym.train.callbacks import safe_changes
from orsd_gym.train.config import Config
from orsd_gym.train.rundir import SAFE_CHANGES


def add_threads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for the model (default: torch's choice; on a busy machine 1 is often fastest)",
    )


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's thread count from ``--threads`` (commands that run no trainer)."""
    if args.threads is not None:
        if args.threads < 1:
            raise argparse.ArgumentTypeError("--threads must be >= 1")
        torch.set_num_threads(args.threads)


def threads_override(args: argparse.Namespace) -> list[str]:
    """``--threads`` as the config override training commands record (``train.threads``)."""
    return [] if args.threads is None else [f"train.threads={args.threads}"]


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout (nothing else)")


def add_no_live(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-live", action="store_true", help="one plain line per iteration instead of the live view (logs, pipes)"
    )


def add_allow_change(parser: argparse.ArgumentParser, when: str) -> None:
    parser.add_argument(
        "--allow-change",
        default="",
        metavar="KEY[,KEY]",
        help=f"{when}: settings that may differ from a run's (one of {', '.join(sorted(SAFE_CHANGES))}, or a "
        f"probe's measurement setting: {', '.join(sorted(safe_changes(probes_for(Config()))))})",
    )


def allowed_changes(args: argparse.Namespace) -> list[str]:
    """The keys of ``--allow-change``, an old spelling read as its new one (`Config.renamed_keys`)."""
    keys = [key.strip() for key in args.allow_change.split(",") if key.strip()]
    return [Config.renamed_keys.get(key, key) for key in keys]
