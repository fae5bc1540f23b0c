"""Generation without padding waste: `webshop_cpu`'s rollout and held-out evaluation on the
former path (each call's pages prefilled in one batch padded to the longest, and rows that
finished their turn riding along masked until the batch's longest turn ends) and on the new one
(rows prefilled in groups of similar length, `CachedForward.group_prefill`; finished rows
leaving the decode batch, `Sampler.drop_finished_rows`), side by side in one process: same
weights, same seeds, alternating; the samples are compared token for token.

Then, in the same process, one training iteration of that rollout through the real `Trainer`
(its update is work the lever does not touch, so the iteration's ratio counts it once for
both paths), and what bounds the rest: the rollout's decode against a bare batched forward of
the same shape (`iteration_profile.decode_limit`), and the update's matmuls against this CPU's
measured float32 matmul throughput.

The preset's shapes are kept (4 goals x 4 attempts, 10 turns, 96 new tokens, the memory
budget, the embedded synthetic catalog); what is cut: the warm start (``--warm-start`` loads
one, else 6 demonstrations are cloned for 1 epoch, enough for the policy to answer in the
page's format) and the evaluation (``--eval-tasks`` of the preset's 32 goals).

    python benchmarks/perf/generation_padding.py --json benchmarks/results/perf/generation_padding_webshop_cpu.json
    python benchmarks/perf/generation_padding.py --dry-run       # tiny random model, tiny shapes (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from orsd_gym import profiling
from orsd_gym.rollout.collector import collect
from orsd_gym.train.config import load_config
from orsd_gym.train.evaluate import evaluate
from orsd_gym.train.seeds import ROLLOUT, iteration_seed
from orsd_gym.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from iteration_profile import decode_limit  # noqa: E402

MODES = ("padded", "unpadded")
DRY_RUN = [
    "model.name=tiny-random",
    "rollout.tasks_per_iteration=1",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "env.max_episode_steps=2",
    "rollout.max_new_tokens=8",
    "warm_start.episodes=0",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-start", default=None, help="warm-start weights to load (else a short one is cloned)")
    parser.add_argument("--eval-tasks", type=int, default=8, help="held-out goals evaluated (the preset: 32)")
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs per mode (the fastest is kept)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true", help="tiny random model and shapes, to check the script")
    parser.add_argument("--new-first", action="store_true", help="run the new path first in each pair")
    parser.add_argument("--rollout-only", action="store_true", help="only the rollout side by side (an order check)")
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides of the preset")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.eval_tasks = 1
    return args


def build_config(args: argparse.Namespace, workdir: Path):
    warm_start = args.warm_start or workdir / "warm_start.safetensors"
    return load_config(
        "webshop_cpu",
        [
            "warm_start.episodes=6",
            "warm_start.epochs=1",
            *(DRY_RUN if args.dry_run else []),
            *args.overrides,
            "train.iterations=1",
            "eval.every=0",
            f"eval.num_tasks={args.eval_tasks}",
            f"train.threads={args.threads}",
            f"train.output_dir={workdir / 'run'}",
            f"warm_start.path={warm_start}",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )


def timed(policy, unpadded: bool, play: Callable[[], list]) -> tuple[dict[str, Any], list]:
    """``play()`` on the new path or the former one, profiled: its seconds, phases and counters."""
    policy.forward.group_prefill = policy.sampler.drop_finished_rows = unpadded
    try:
        with profiling.profiling() as profiler:
            started = time.perf_counter()
            trajectories = play()
            seconds = time.perf_counter() - started
    finally:
        policy.forward.group_prefill = policy.sampler.drop_finished_rows = True
    phases = {path: stats.seconds for path, stats in profiler.phases.items()}
    return {"seconds": seconds, "phases": phases, "counters": dict(profiler.counters)}, trajectories


def samples_difference(a: list, b: list) -> dict[str, Any]:
    """Whether two plays sampled the same tokens, and their largest log-prob difference."""
    same = len(a) == len(b) and all(x.token_ids == y.token_ids for x, y in zip(a, b, strict=True))
    gap = 0.0
    if same:
        for x, y in zip(a, b, strict=True):
            if x.logprobs:
                gap = max(gap, float((torch.tensor(x.logprobs) - torch.tensor(y.logprobs)).abs().max()))
    return {"identical_tokens": same, "max_logprob_difference": gap}


def side_by_side(policy, play: Callable[[], list], repeats: int, new_first: bool) -> dict[str, Any]:
    """Both paths, alternating ``repeats`` times (the former first unless ``new_first``); the
    fastest run of each and how they compare."""
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    played: dict[str, list] = {}
    for _ in range(repeats):
        for mode in reversed(MODES) if new_first else MODES:
            result, played[mode] = timed(policy, mode == "unpadded", play)
            runs[mode].append(result)
    best = {mode: min(results, key=lambda r: r["seconds"]) for mode, results in runs.items()}
    return {
        **best,
        "all_seconds": {mode: [r["seconds"] for r in results] for mode, results in runs.items()},
        "speedup": best["padded"]["seconds"] / best["unpadded"]["seconds"],
        "samples": samples_difference(played["padded"], played["unpadded"]),
        "trajectories": played["unpadded"],
    }


def matmul_gflops(threads: int, rows: int = 2048, inner: int = 576, cols: int = 1536, repeats: int = 5) -> float:
    """This CPU's float32 matmul throughput at an update-like shape (best of ``repeats``)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(rows, inner), torch.randn(inner, cols)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, (time.perf_counter() - started) / 10)
    return 2 * rows * inner * cols / best / 1e9


def update_matmul_gflop(policy, trajectories: list, scoring_pass: bool) -> dict[str, float]:
    """The matmul work of one update of ``trajectories`` (one epoch): the decoder's linear
    layers on every token, forward and, the base weights being frozen (LoRA), a backward of
    the same size for the inputs' gradients; the LM head on the sampled tokens only; plus, with
    ``scoring_pass``, the no-gradient pass that scores old log-probs. Attention and LoRA's own
    matmuls left out: a lower bound."""
    model = policy.model
    linear = sum(
        module.weight.numel()
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and "lora_" not in name and module is not policy.forward.lm_head
    )
    head = policy.forward.lm_head.weight.numel()
    tokens = sum(len(t.token_ids) for t in trajectories)
    sampled = sum(sum(t.loss_mask) for t in trajectories)
    passes = 3 if scoring_pass else 2
    gflop = passes * 2 * (linear * tokens + head * sampled) / 1e9
    return {"tokens": tokens, "sampled_tokens": sampled, "linear_parameters": linear, "gflop": gflop}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="finished-rows-") as workdir:
        config = build_config(args, Path(workdir))
        with profiling.profiling() as setup:
            trainer = Trainer(config)
        policy = trainer.policy
        seed = iteration_seed(config.train.seed, 0, ROLLOUT)

        def rollout() -> list:
            groups = trainer.plan.train[0]
            with torch.no_grad():
                return collect(
                    trainer.envs.train,
                    policy,
                    [group.spec for group in groups],
                    group_size=config.rollout.group_size,
                    sampling=config.rollout.sampling(config.rollout.temperature, seed),
                    options=config.rollout,
                )

        def evaluation() -> list:
            return evaluate(policy, trainer.envs.eval, trainer.plan, config, seed=0)[0]

        parts = [("rollout", rollout)] if args.rollout_only else [("rollout", rollout), ("eval", evaluation)]
        results = {}
        for part, play in parts:
            results[part] = side_by_side(policy, play, args.repeats, args.new_first)
            report_part(part, results[part])
        if args.rollout_only:
            record = {"load_average": {"start": load_before, "end": os.getloadavg()}, "rollout": results["rollout"]}
            return finish(args, record)
        with profiling.profiling() as iteration:
            trainer.run()
    phases = {path: stats.seconds for path, stats in iteration.phases.items()}
    rollout_trajectories = results["rollout"].pop("trajectories")
    rest = phases.get("prepare", 0.0) + phases.get("update", 0.0)
    seconds = {mode: results["rollout"][mode]["seconds"] + rest for mode in MODES}
    decode = results["rollout"]["unpadded"]["counters"]
    batch = decode["decode_row_steps"] / max(1, decode["decode_steps"])
    length = decode["decode_attended_positions"] / max(1, decode["decode_row_steps"])
    steps = 4 if args.dry_run else 16
    limit = decode_limit(policy, max(1, round(batch)), max(1, round(length)), steps=steps)
    update = update_matmul_gflop(policy, rollout_trajectories, scoring_pass="update/loss_inputs" in phases)
    throughput = matmul_gflops(args.threads)
    record = {
        "load_average": {"start": load_before, "end": os.getloadavg()},
        "setup_seconds": {path: stats.seconds for path, stats in setup.phases.items()},
        "rollout": results["rollout"],
        "eval": results["eval"],
        "iteration_phases": phases,
        "iteration_seconds": seconds,
        "iteration_speedup": seconds["padded"] / seconds["unpadded"],
        "decode_limit": limit,
        "update_matmuls": update | {"cpu_gflops": throughput, "lower_bound_seconds": update["gflop"] / throughput},
    }
    report(record)
    return finish(args, record)


def finish(args: argparse.Namespace, record: dict[str, Any]) -> int:
    """Print the load, write the record; 0 when both paths sampled the same tokens."""
    for part in ("rollout", "eval"):
        record.get(part, {}).pop("trajectories", None)
    load = record["load_average"]
    print(f"load average (1, 5, 15 min): {load['start']} at the start, {load['end']} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **record}, indent=1))
    parts = [part for part in ("rollout", "eval") if part in record]
    return 0 if all(record[part]["samples"]["identical_tokens"] for part in parts) else 1


def report_part(part: str, result: dict[str, Any]) -> None:
    print(f"{part}: padded vs unpadded generation (fastest of {len(result['all_seconds']['padded'])})")
    for mode in MODES:
        run = result[mode]
        counters = run["counters"]
        split = ", ".join(f"{path} {seconds:.1f} s" for path, seconds in run["phases"].items())
        print(
            f"  {mode:<10}{run['seconds']:8.1f} s ({split}); "
            f"{counters.get('decode_row_steps', 0)} decode row-steps for {counters.get('sampled_tokens', 0)} "
            f"sampled tokens; {counters.get('prefill_tokens', 0)} prefill tokens in "
            f"{counters.get('prefill_positions', 0)} padded positions"
        )
    print(f"  speedup {result['speedup']:.2f}x; samples {result['samples']}")


def report(record: dict[str, Any]) -> None:
    """The iteration and the bounds (the rollout and evaluation are reported as they finish)."""
    phases = record["iteration_phases"]
    print(
        "iteration (the trainer's; its rollout on the new path): "
        + ", ".join(f"{path} {s:.1f} s" for path, s in phases.items() if "/" not in path)
    )
    seconds = record["iteration_seconds"]
    print(
        f"iteration, rollout side by side + the update once: {seconds['padded']:.1f} s vs "
        f"{seconds['unpadded']:.1f} s: {record['iteration_speedup']:.2f}x"
    )
    limit = record["decode_limit"]
    print(
        f"decode limit (batch {limit['batch']}, {limit['length']} positions): engine "
        f"{limit['engine_row_steps_per_s']:.1f} row-steps/s, bare forward {limit['bare_tokens_per_s']:.1f} tokens/s"
    )
    update = record["update_matmuls"]
    print(
        f"update: {update['tokens']} tokens, {update['gflop']:.0f} GFLOP of matmuls at {update['cpu_gflops']:.1f} "
        f"GFLOP/s measured = {update['lower_bound_seconds']:.1f} s at least; measured {phases.get('update', 0):.1f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
