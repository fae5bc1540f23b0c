"""Does GRPO learn? SmolLM2-135M on easy generated ALFWorld tasks, success per iteration.

Starts from the demo preset's behaviour-cloning warm start (6 planner demonstrations), where
the held-out success rate is neither 0 nor 1 and training groups have mixed outcomes, then runs
plain GRPO and prints, per iteration, the training success rate, the fraction of groups with a
learning signal and the held-out success rate (same fixed evaluation tasks throughout).

    python benchmarks/studies/grpo_learning_signal.py --iterations 4 [KEY=VALUE overrides]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from orsd_gym.train.config import load_config
from orsd_gym.train.metrics import read_metrics
from orsd_gym.train.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--out", default="runs/grpo_learning_signal")
    parser.add_argument("--json", default=None, help="write the per-iteration figures and the ratio here")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    config = load_config(
        "demo",
        [
            "algo.name=grpo",
            f"train.iterations={args.iterations}",
            "eval.every=1",
            f"train.output_dir={args.out}",
            "logging.live=false",
            *args.overrides,
        ],
    )
    Trainer(config).run()
    evals = {int(r["iteration"]): r for r in read_metrics(Path(args.out) / "eval.jsonl")}
    metrics = {int(r["iteration"]): r for r in read_metrics(Path(args.out) / "metrics.jsonl")}
    table = Table(title="GRPO, smollm2-135m, generated ALFWorld (pick_and_place_simple, 2 receptacles)")
    for column in ("iteration", "train success", "mixed groups", "held-out success", "env steps"):
        table.add_column(column, justify="right")
    for iteration in sorted(evals):
        m = metrics.get(iteration, {})
        mixed = 1.0 - m["algo/zero_adv_group_frac"] if "algo/zero_adv_group_frac" in m else None
        table.add_row(
            str(iteration),
            f"{m['train/success_rate']:.3f}" if m else "-",
            f"{mixed:.2f}" if mixed is not None else "-",
            f"{evals[iteration]['eval/success_rate']:.3f}",
            str(evals[iteration]["env_steps"]),
        )
    Console().print(table)
    first, last = evals[min(evals)], evals[max(evals)]
    summary = {
        "held_out_success_before": first["eval/success_rate"],
        "held_out_success_after": last["eval/success_rate"],
        "ratio_after_to_before": (last["eval/success_rate"] / first["eval/success_rate"])
        if first["eval/success_rate"]
        else None,
    }
    print(json.dumps(summary))
    if args.json:
        record = {"summary": summary, "evals": list(evals.values()), "metrics": list(metrics.values())}
        Path(args.json).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
