"""``orsd-gym compare``: train every algorithm on every seed of one env, then the report."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from rich.console import Console

from orsd_gym import configio
from orsd_gym.algos.base import algorithm_variants
from orsd_gym.cli.options import add_allow_change, add_json, add_no_live, add_threads, allowed_changes, threads_override
from orsd_gym.errors import UsageError
from orsd_gym.experiments.compare import Arm, compare, run_config, seeds_owned
from orsd_gym.experiments.report import print_summary
from orsd_gym.train import rundir_lock
from orsd_gym.train.config import Config

#: What `orsd-gym` prints after Ctrl-C.
CONTINUE_HINT = "run the same command again to continue (finished runs are reused, others resume from their checkpoint)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="base YAML config, or the name of a shipped config")
    parser.add_argument("--env", help="env id (overrides env.id of the config)")
    parser.add_argument(
        "--algos",
        default="grpo,orsd",
        help=(
            "comma-separated arms: algorithm names, the variants algorithms declare "
            f"({', '.join(algorithm_variants())}), "
            "and classic-RL baselines sb3:maskable_ppo, sb3:ppo, sb3:dqn, random; an LLM arm takes "
            "algorithm settings as @key=value (orsd:expert@beta=0.1), so one comparison holds a sweep"
        ),
    )
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
    parser.add_argument(
        "--seed-list",
        help=(
            "these seeds instead of 0..N-1 (e.g. 1,2): processes sharing one --out each train their own "
            "seeds; a last run with --seeds N reads every finished run and writes the whole report"
        ),
    )
    parser.add_argument("--out", default="reports/compare", help="report directory")
    parser.add_argument("--fresh", action="store_true", help="retrain runs already in the report directory")
    add_allow_change(parser, "runs already in the report directory continue")
    add_no_live(parser)
    add_threads(parser)
    add_json(parser, "the results (results.json)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")


def run(args: argparse.Namespace) -> int:
    overrides = [*args.overrides, *threads_override(args)] + ([f"env.id={args.env}"] if args.env else [])
    base = configio.load(Config, args.config, overrides)
    run_comparison(base, args, Path(args.out))
    return 0


def _seeds(args: argparse.Namespace) -> list[int]:
    if args.seed_list is None:
        if args.seeds < 1:
            raise UsageError("--seeds must be >= 1")
        return list(range(args.seeds))
    try:
        seeds = [int(text) for text in args.seed_list.split(",")]
    except ValueError:
        raise UsageError(f"--seed-list {args.seed_list!r}: expected seeds separated by commas, e.g. 1,2") from None
    if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seed-list {args.seed_list!r}: seeds must be distinct and >= 0")
    return seeds


def run_comparison(base: Config, args: argparse.Namespace, out: Path) -> Path:
    """Check the arguments, train, write and print the report (``demo`` runs this too)."""
    names = [a.strip() for a in args.algos.split(",") if a.strip()]
    if not names:
        raise UsageError("--algos is empty")
    seeds = _seeds(args)
    for name in names:
        run_config(base, Arm.parse(name), 0, out)  # every arm's settings are valid before any run starts
    console = Console(stderr=args.json)
    with seeds_owned(out, seeds, lambda text: console.out(text, highlight=False)):
        if args.fresh:
            # Only this comparison's seeds: another process may be training the others in the same --out.
            for seed in seeds:
                for run_dir in (out / "runs").glob(f"*-seed{seed}"):
                    _remove_run(run_dir, console)
        report = compare(
            base,
            names,
            seeds,
            out,
            live=not args.no_live,
            resume=not args.fresh,
            allow_changes=allowed_changes(args),
            console=console,
        )
    if args.json:
        print((report.parent / "results.json").read_text(encoding="utf-8"))
    else:
        print_summary(report, console)
    return report


def _remove_run(run_dir: Path, console: Console) -> None:
    """Delete a run directory unless a live process (``orsd-gym train`` into it) owns it."""
    lock = rundir_lock.acquire(run_dir / rundir_lock.RUN_LOCK, f"run directory {run_dir}", console.out)
    try:
        shutil.rmtree(run_dir)
    finally:
        rundir_lock.release(lock)
