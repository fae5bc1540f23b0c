"""``orsd-gym algos``: list the registered algorithms (what ``algo.name`` accepts)."""

from __future__ import annotations

import argparse
import inspect

from rich.console import Console
from rich.table import Table

from orsd_gym.algos.base import ALGORITHMS, registered_algorithms


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--names", action="store_true", help="print only the names, one per line")


def run(args: argparse.Namespace) -> int:
    names = registered_algorithms()
    if args.names:
        for name in names:
            print(name)
        return 0
    table = Table(title="Registered algorithms (algo.name; settings under algo.per_algo.<name>)")
    table.add_column("name", style="bold")
    table.add_column("builds on")
    table.add_column("what it is")
    for name in names:
        algorithm = ALGORITHMS[name]
        bases = [base.name for base in algorithm.__mro__[1:] if base in ALGORITHMS.values()]
        summary = (inspect.getdoc(algorithm) or "").splitlines()[0]
        table.add_row(name, ", ".join(bases) or "-", summary)
    Console().print(table)
    return 0
