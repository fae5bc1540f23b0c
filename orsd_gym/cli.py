"""The ``orsd-gym`` command.

Each subcommand lives next to the feature it drives, in a module exposing
``add_arguments(parser)`` and ``run(args) -> int``; this file only dispatches, and imports a
subcommand's module (and so torch or an env engine) only when that subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "envs": ("orsd_gym.envs.cli", "list the registered text envs"),
    "demo": ("orsd_gym.demo", "the embedded main job (what `make demo` runs)"),
    "train": ("orsd_gym.train.cli", "train a policy with GRPO or ORSD from a YAML config"),
    "eval": ("orsd_gym.train.evaluate", "evaluate a checkpoint on held-out tasks"),
    "compare": ("orsd_gym.train.compare", "plain GRPO vs ORSD on one env: train, evaluate, write a report"),
    "inspect": ("orsd_gym.train.credit", "show a trajectory's token-level credit (ORSD correction, GRPO advantage)"),
    "play": ("orsd_gym.envs.play", "play an env yourself in the terminal"),
    "rollout": ("orsd_gym.rollout.cli", "play a model on an env and write Trajectories (JSONL) with a summary"),
}


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orsd-gym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module_name)
        _load(module_name).add_arguments(sub_parser)
    return parser


def _load(module_name: str):
    return importlib.import_module(module_name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(_load(args._module).run(args) or 0)
    except CLIError as error:
        print(f"orsd-gym {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"orsd-gym {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
