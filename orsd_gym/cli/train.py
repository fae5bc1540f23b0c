"""``orsd-gym train``: one training run from a YAML config and dotted overrides.

``train.workers=N`` runs N data-parallel workers with Ray Train; under ``torchrun
--nproc_per_node N -m orsd_gym.cli train ...`` this process is one of torchrun's workers
(`orsd_gym.train.launch`).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from orsd_gym import jsonio
from orsd_gym.cli.options import add_allow_change, add_json, add_no_live, add_threads, allowed_changes, threads_override
from orsd_gym.configio import shipped_configs
from orsd_gym.probes import probes_for
from orsd_gym.train.config import load_config
from orsd_gym.train.launch import train

#: What `orsd-gym` prints after Ctrl-C.
CONTINUE_HINT = "continue from the last checkpoint with the same command and --resume"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        required=True,
        help=f"YAML config file, or a shipped config: {', '.join(shipped_configs())}",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in train.output_dir from its newest good checkpoint"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a run already in train.output_dir")
    add_allow_change(parser, "with --resume")
    add_no_live(parser)
    add_threads(parser)
    add_json(parser, "the run's summary")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. optim.lr=1e-5")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, [*args.overrides, *threads_override(args)])
    console = Console(stderr=args.json)
    summary = train(
        config,
        resume=args.resume,
        overwrite=args.overwrite,
        allow_changes=allowed_changes(args),
        live=not args.no_live,
        console=console,
        callbacks=probes_for(config),
    )
    if summary.worker != 0:  # torchrun's other workers: worker 0 reports the run
        return 0
    if args.json:
        print(jsonio.dumps({"output_dir": str(summary.output_dir), "final_eval": summary.final_eval}, indent=1))
    else:
        final = summary.final_eval or {}
        success = f"final eval success {final['eval/success_rate']:.3f}" if "eval/success_rate" in final else ""
        console.print(f"run in {summary.output_dir} done. {success}".strip(), highlight=False)
    return 0
