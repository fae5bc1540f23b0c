"""``orsd-gym train``: one training run from a YAML config and dotted overrides."""

from __future__ import annotations

import argparse
import json

from orsd_gym.train.config import load_config
from orsd_gym.train.trainer import Trainer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file, or the name of a shipped config (see configs/)")
    parser.add_argument(
        "--resume", action="store_true", help="continue from the newest good checkpoint in train.output_dir"
    )
    parser.add_argument("--no-live", action="store_true", help="plain output instead of the live view")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. optim.lr=1e-5")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides)
    summary = Trainer(config, resume=args.resume, live=not args.no_live).run()
    print(json.dumps({"output_dir": str(summary.output_dir), "final_eval": summary.final_eval}, indent=1))
    return 0
