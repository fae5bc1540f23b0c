"""``orsd-gym envs``: list the registered text envs."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from orsd_gym.envs import registered_text_envs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ids", action="store_true", help="print only the env ids, one per line")


def run(args: argparse.Namespace) -> int:
    infos = registered_text_envs()
    if args.ids:
        for info in infos:
            print(info.env_id)
        return 0
    table = Table(title="Registered text envs")
    table.add_column("id", style="bold")
    table.add_column("description")
    for info in infos:
        table.add_row(info.env_id, info.description or info.entry_point)
    Console().print(table)
    return 0
