"""One GRPO iteration of a CPU preset with gradient checkpointing on and off, side by side:
the update's seconds and peak resident memory, and how far apart the two updates leave the
weights.

Each mode trains one iteration through the real `Trainer` in a fresh process (its own peak
memory), from the same warm start and seed, so both update the same rollout (checked: their
rollout metrics must be equal). Both run under the same memory budget (``optim.max_memory_gb``,
which sizes each micro-batch from the update's estimated activations), so the modes differ only
in what checkpointing changes: recomputation, and how many rows a micro-batch may hold. The
modes alternate ``--repeats`` times and the fastest update of each is compared.

The default shape is the `webshop_cpu` preset's iteration with fewer tasks. Give it the warm
start of a `webshop_cpu` comparison (``<out>/warm_start/seed0.safetensors``) to skip cloning,
and the official data by ``$WEBSHOP_DATA`` or an ``env.kwargs.data_dir=...`` override:

    python benchmarks/perf/update_checkpointing.py --warm-start runs/cmp/warm_start/seed0.safetensors \\
        --json benchmarks/results/perf/update_checkpointing_webshop.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from iteration_profile import measure_in_child

MODES = {"checkpointing": "true", "no_checkpointing": "false"}
#: Metrics of the rollout both modes must share (the update cannot change them).
ROLLOUT_KEYS = ("env_steps", "train/mean_return", "train/tokens_generated")


def run_child(preset: str, mode: str, workdir: Path, overrides: list[str]) -> dict:
    """One iteration of ``preset`` in this process with checkpointing per ``mode``; the update's
    profile, the rollout's metrics and the path of the trainable weights it left."""
    from safetensors.torch import save_file

    from orsd_gym import profiling
    from orsd_gym.train.config import load_config
    from orsd_gym.train.metrics import read_metrics
    from orsd_gym.train.trainer import Trainer

    out = workdir / mode
    config = load_config(
        preset,
        [
            *overrides,
            f"model.gradient_checkpointing={MODES[mode]}",
            "train.iterations=1",
            "eval.every=0",
            f"train.output_dir={out}",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    with profiling.profiling() as profiler:
        with profiling.phase("setup"):
            trainer = Trainer(config)
        trainer.run()
    weights = workdir / f"{mode}.safetensors"
    save_file({k: v.contiguous() for k, v in trainer.policy.state_dict().items()}, str(weights))
    update = profiler.as_dict()["phases"]["update"]
    metrics = read_metrics(out / "metrics.jsonl")[-1]
    return {
        "update_seconds": update["seconds"],
        "update_peak_rss_gb": update["peak_rss_gb"],
        "process_peak_rss_gb": profiler.as_dict()["peak_rss_gb"],
        "loss_tokens": metrics.get("loss/tokens"),
        "loss": {key: value for key, value in metrics.items() if key.startswith("loss/")},
        "lr": config.optim.lr,
        "rollout": {key: metrics.get(key) for key in ROLLOUT_KEYS},
        "weights": str(weights),
    }


def weight_gap(first: str, second: str) -> dict:
    """The largest absolute difference between two weight files, and their largest weight."""
    from safetensors.torch import load_file

    a, b = load_file(first), load_file(second)
    gap = max(float((a[k] - b[k]).abs().max()) for k in a)
    scale = max(float(a[k].abs().max()) for k in a)
    return {"max_abs_diff": gap, "max_abs_weight": scale}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="webshop_cpu")
    parser.add_argument("--tasks", type=int, default=2, help="tasks per iteration (each a group of the preset's size)")
    parser.add_argument("--memory-gb", type=float, default=4.0, help="optim.max_memory_gb of both modes")
    parser.add_argument("--warm-start", default=None, help="warm-start weights to load (else cloned once here)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs per mode (the fastest is kept)")
    parser.add_argument("--json", default=None, help="write the measurements to this file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="extra overrides of both modes' config")
    parser.add_argument("--_child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        preset, mode, workdir = args._child
        print(json.dumps(run_child(preset, mode, Path(workdir), args.overrides)))
        return 0
    with tempfile.TemporaryDirectory(prefix="update-checkpointing-") as workdir:
        overrides = [
            *args.overrides,
            f"rollout.tasks_per_iteration={args.tasks}",
            f"optim.max_memory_gb={args.memory_gb}",
            f"train.threads={args.threads}",
            f"warm_start.path={args.warm_start or Path(workdir) / 'warm_start.safetensors'}",
        ]
        runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for _ in range(args.repeats):
            for mode in MODES:
                result = measure_in_child(__file__, [args.preset, mode, workdir], overrides)
                runs[mode].append(result)
                print(
                    f"{mode}: update {result['update_seconds']:.1f} s over {result['loss_tokens']} sampled tokens, "
                    f"update peak {result['update_peak_rss_gb']:.2f} GB; rollout {result['rollout']}"
                )
        rollouts = {json.dumps(run["rollout"], sort_keys=True) for mode in MODES for run in runs[mode]}
        if len(rollouts) != 1:
            raise SystemExit(f"the modes updated different rollouts, so their updates cannot be compared: {rollouts}")
        best = {mode: min(runs[mode], key=lambda run: run["update_seconds"]) for mode in MODES}
        gap = weight_gap(best["checkpointing"]["weights"], best["no_checkpointing"]["weights"])
    ratio = best["checkpointing"]["update_seconds"] / best["no_checkpointing"]["update_seconds"]
    print(
        f"update without checkpointing: {ratio:.2f}x as fast "
        f"({best['checkpointing']['update_seconds']:.1f} s vs {best['no_checkpointing']['update_seconds']:.1f} s); "
        f"update peak {best['checkpointing']['update_peak_rss_gb']:.2f} GB vs "
        f"{best['no_checkpointing']['update_peak_rss_gb']:.2f} GB (budget {args.memory_gb} GB); "
        f"weights after the update differ by at most {gap['max_abs_diff']:.2e} "
        f"({gap['max_abs_diff'] / best['checkpointing']['lr']:.2f} of the learning rate, AdamW's step size; "
        f"largest weight {gap['max_abs_weight']:.2e})"
    )
    for mode in MODES:
        print(f"{mode} loss metrics: {best[mode]['loss']}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"args": vars(args), "runs": runs, "speedup": ratio, "weight_gap": gap}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
