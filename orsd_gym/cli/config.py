"""``orsd-gym config show``: the resolved config a command would run, as YAML."""

from __future__ import annotations

import argparse

import yaml

from orsd_gym.train.config import load_config, run_record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="print the resolved config (every default included)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    show.add_argument("--config", help="YAML config file or the name of a shipped config (default: the defaults)")
    show.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. optim.lr=1e-5")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.overrides)
    print(yaml.safe_dump(run_record(config), sort_keys=False), end="")
    return 0
