"""The ``orsd-gym`` command: one module per subcommand, on top of the library.

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``; this module
only dispatches, and imports a subcommand's module (and so torch or an env engine) only when
that subcommand runs. Library code never imports this package. Any error the package raises on
purpose (`orsd_gym.errors.OrsdGymError`) is printed as one line with exit status 2; Ctrl-C and
SIGTERM end a command with a line saying where it stopped and how to continue.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

from orsd_gym import progress
from orsd_gym.errors import DiskWriteError, OrsdGymError
from orsd_gym.plugins import installed_plugins

#: name -> (module under orsd_gym.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "envs": ("envs", "list the registered text envs"),
    "algos": ("algos", "list the registered algorithms and what each builds on"),
    "demo": ("demo", "the embedded main job (what `make demo` runs)"),
    "train": ("train", "train a policy with a registered algorithm (GRPO, ORSD, GiGPO) from a YAML config"),
    "eval": ("evaluate", "evaluate a checkpoint on held-out tasks"),
    "compare": ("compare", "plain GRPO vs ORSD on one env: train, evaluate, write a report"),
    "inspect": ("inspect", "show a trajectory's token-level credit (advantages, ORSD's correction, GiGPO's step)"),
    "play": ("play", "play an env yourself in the terminal"),
    "rollout": ("rollout", "play a model on an env and write Trajectories (JSONL) with a summary"),
    "config": ("config", "show the resolved config of a YAML file and overrides"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orsd-gym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(
            name, help=help_text, description=help_text, formatter_class=argparse.ArgumentDefaultsHelpFormatter
        )
        sub_parser.set_defaults(_module=module_name)
        _load(module_name).add_arguments(sub_parser)
    return parser


def _load(module_name: str):
    return importlib.import_module(f"orsd_gym.cli.{module_name}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse takes a command's KEY=VALUE overrides in one run of words: the ones written
        # after an option (``--config X a=b``) would be refused; they are overrides all the same.
        if not hasattr(args, "overrides") or any(word.startswith("-") or "=" not in word for word in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command is None:
        parser.print_help()
        return 2
    # The subcommand's module is imported inside, so that Ctrl-C during a slow import (torch) is
    # reported like any other interruption.
    return run_reporting_errors(
        f"orsd-gym {args.command}",
        lambda: _run(args),
        lambda: getattr(_load(args._module), "CONTINUE_HINT", ""),
        # A person at the keyboard plays: lines about a silent minute would only interrupt them.
        report_progress=args.command != "play",
    )


def _run(args: argparse.Namespace) -> int:
    # Installed packages' plugins register their envs and algorithms before any config is read.
    installed_plugins()
    return _load(args._module).run(args)


def run_reporting_errors(
    name: str,
    command: Callable[[], int | None],
    continue_hint: str | Callable[[], str] = "",
    *,
    report_progress: bool = True,
) -> int:
    """Run a command's body and return its exit status, reporting what ends it early as one line.

    Shared by the subcommands and the scripts in ``benchmarks/`` that take user input. Its phases
    print progress lines to standard error (`orsd_gym.progress`) unless ``report_progress`` is
    false. SIGTERM (a scheduler, ``timeout``) ends it as Ctrl-C does: what it holds is released
    and a line says where it stopped; ``continue_hint`` (or a function giving it) says how to
    continue.
    """
    lines = progress.reporting() if report_progress else contextlib.nullcontext()
    with _terminate_as_interrupt(), lines as reporter:
        try:
            with progress.phase(name, announce=False):  # silent for a minute (a slow import): a line says so
                return int(command() or 0)
        except DiskWriteError as error:
            # The disk filled up (or the like) mid-work: what was written is intact; say how to go on.
            hint = continue_hint() if callable(continue_hint) else continue_hint
            error.next_step = hint or error.next_step
            print(f"{name}: error: {error}", file=sys.stderr)
            return 2
        except OrsdGymError as error:
            print(f"{name}: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as stop:
            # What a run has done is on disk up to its last checkpoint: say how to continue from it.
            hint = continue_hint() if callable(continue_hint) else continue_hint
            how = "terminated (SIGTERM)" if isinstance(stop, Terminated) else "interrupted"
            where = f" during {reporter.stopped_at}" if reporter and reporter.stopped_at else ""
            print(f"{name}: {how}{where}{'; ' + hint if hint else ''}", file=sys.stderr)
            return 128 + signal.SIGTERM if isinstance(stop, Terminated) else 130
        except BrokenPipeError:
            # The reader stopped early (``| head``): what it read is what it wanted.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command was, so that it unwinds as after Ctrl-C."""


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
