"""One training iteration, phase by phase: where the time and the resident memory go.

For each config (``demo``: the `make demo` preset; ``long``: the same with ALFWorld-length
episodes, bigger rooms and 15 turns) GRPO and ORSD train `ITERATIONS` iterations on the same
seed (so on the same first rollouts), each in a fresh process under `orsd_gym.profiling`,
through the real `Trainer` (warm start shared through one file, no evaluation). Printed per
phase: calls, seconds, share of the iterations (rollout + prepare + update) and peak resident
memory (the second iteration holds the optimiser's state: that is the steady state).

Then the decode limit, in the same process right after training: the rollout's own decode
throughput (rows x steps its forwards computed per second of its decode phase, and the sampled
tokens per second: rows that finished their turn ride along masked until the batch's longest
turn ends), and side by side on the same contexts at the rollout's mean batch size and attended
length, the engine's decode against the model's own batched decode (a bare forward with
transformers' KV cache, one token per row per step: no sampling, masks or bookkeeping).

    python benchmarks/perf/iteration_profile.py                                  # demo + long, ~1 h on 2 cores
    python benchmarks/perf/iteration_profile.py --configs demo --json profile.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

#: name: (preset, its overrides). ``webshop_cpu`` keeps the preset's shapes (4 goals x 4
#: attempts, 10 turns, 96 new tokens, the memory budget) on the embedded synthetic catalog and
#: cuts only what is repeated: the warm start (6 demonstrations, 1 epoch: enough for the policy
#: to answer in the page's format, so its turns are as long as a trained policy's) and the
#: held-out evaluation (8 of its 32 goals, evaluated once after the iterations).
CONFIGS = {
    "demo": ("demo", []),
    "long": (
        "demo",
        [
            "env.kwargs.generator={num_tasks: 64, max_receptacles: 6, num_distractors: 4}",
            "env.max_episode_steps=15",
            "rollout.max_turns=15",
            "rollout.max_episode_tokens=3072",
        ],
    ),
    "webshop_cpu": ("webshop_cpu", ["warm_start.episodes=6", "warm_start.epochs=1", "eval.num_tasks=8"]),
}
#: Configs whose profile includes one held-out evaluation after the iterations (phase ``eval``).
EVALUATED = {"webshop_cpu"}
#: The phases an iteration is made of (the trainer's top-level phases).
ITERATION = ("rollout", "prepare", "update")
#: Iterations per run (an override of ``train.iterations`` changes it): the second one has the
#: optimiser's state (AdamW's moments are made at the first step), so its memory is the steady
#: state's; times are per iteration.
ITERATIONS = 2


def bare_decode_tokens_per_s(policy, contexts, steps: int) -> float:
    """Tokens per second of ``steps`` bare decode forwards of the policy's model, one token per
    row, after ``contexts``: on its device, computing in its inference dtype as sampling does."""
    import torch
    from transformers import DynamicCache

    from orsd_gym.policies.precision import computing_in

    model = policy.model
    # A LoRA model's forward takes **kwargs: the base model's signature says what the cache is called.
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cache_kwarg = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
    ids = torch.tensor(contexts, device=policy.device)
    cache = DynamicCache()
    with computing_in(policy.device.type, policy.inference_dtype, policy.weights_dtype, grad=False):
        model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_kwarg: cache})
        token = ids[:, -1:]
        _synchronize(policy.device)
        started = time.perf_counter()
        for _ in range(steps):
            model(input_ids=token, use_cache=True, logits_to_keep=1, **{cache_kwarg: cache})
        _synchronize(policy.device)
        return len(contexts) * steps / (time.perf_counter() - started)


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def engine_decode_row_steps_per_s(policy, contexts, steps: int, seed: int) -> float:
    """Rows x steps per second of `HFPolicy.generate`'s decode phase after ``contexts``."""
    from orsd_gym import profiling
    from orsd_gym.policies.base import SamplingParams

    with profiling.profiling() as profiler:
        policy.generate(contexts, SamplingParams(max_new_tokens=steps + 1, seed=seed))
    return profiler.counters["decode_row_steps"] / profiler.phases["decode"].seconds


def decode_limit(policy, batch: int, length: int, steps: int = 16, repeats: int = 3) -> dict:
    """The engine's decode throughput and the bare forward's, side by side on the same contexts
    (alternating, best of ``repeats`` each: on a shared machine the best is the least disturbed)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    contexts = torch.randint(0, policy.vocab_size, (batch, length), generator=generator).tolist()
    engine, bare = [], []
    for repeat in range(repeats):
        engine.append(engine_decode_row_steps_per_s(policy, contexts, steps, seed=repeat))
        bare.append(bare_decode_tokens_per_s(policy, contexts, steps))
    return {"batch": batch, "length": length, "engine_row_steps_per_s": max(engine), "bare_tokens_per_s": max(bare)}


def run_child(config_name: str, algo: str, overrides: list[str], workdir: Path) -> dict:
    """One iteration in this process; returns the profile, the run's metrics and the decode limit."""
    from orsd_gym import profiling
    from orsd_gym.train.config import load_config
    from orsd_gym.train.evaluate import evaluate
    from orsd_gym.train.metrics import read_metrics
    from orsd_gym.train.trainer import Trainer

    out = workdir / f"{config_name}-{algo}"
    preset, preset_overrides = CONFIGS[config_name]
    config = load_config(
        preset,
        [
            f"train.iterations={ITERATIONS}",
            *preset_overrides,
            *overrides,
            f"algo.name={algo}",
            "eval.every=0",
            f"train.output_dir={out}",
            f"warm_start.path={workdir / f'{config_name}-warm_start.safetensors'}",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    with profiling.profiling() as profiler:
        with profiling.phase("setup"):  # model load, warm start (cloned once per config), frozen copies
            trainer = Trainer(config)
        trainer.run()
        if config_name in EVALUATED:
            with profiling.phase("eval"):
                evaluate(trainer.policy, trainer.envs.eval, trainer.plan, config, seed=0)
    record = read_metrics(out / "metrics.jsonl")[-1]
    result = {"profile": profiler.as_dict(), "metrics": record}
    decode = decode_stats(profiler, trainer.policy)
    if decode:
        result["decode"] = decode
    return result


def decode_stats(profiler, policy) -> dict | None:
    """The decode throughput of a profiled training run, over all its generation (rollouts and
    ORSD's proposals: the counters are the run's; None: it decoded nothing), and side by side on
    contexts of its mean batch size and attended length, the engine's decode against the bare
    forward (`decode_limit`)."""
    counters = profiler.counters
    steps = counters.get("decode_steps", 0)
    if not steps:
        return None
    batch = counters["decode_row_steps"] / steps
    length = counters["decode_attended_positions"] / counters["decode_row_steps"]
    decode_seconds = sum(stats.seconds for path, stats in profiler.phases.items() if path.endswith("/decode"))
    return {
        "mean_batch": batch,
        "mean_attended_length": length,
        "engine_row_steps_per_s": counters["decode_row_steps"] / decode_seconds,
        "engine_sampled_tokens_per_s": counters["sampled_tokens"] / decode_seconds,
        "side_by_side": decode_limit(policy, max(1, round(batch)), max(1, round(length))),
    }


def iteration_seconds(result: dict) -> float:
    """Mean wall time of an iteration (rollout + prepare + update)."""
    phases = result["profile"]["phases"]
    return sum(phases[p]["seconds"] for p in ITERATION if p in phases) / iterations(result)


def iterations(result: dict) -> int:
    """How many iterations a profiled run trained (one rollout each)."""
    return result["profile"]["phases"]["rollout"]["calls"]


def print_result(name: str, result: dict) -> None:
    total = iteration_seconds(result)
    print(
        f"\n== {name}: {total:.1f} s per iteration (rollout + prepare + update), process peak "
        f"{result['profile']['peak_rss_gb']:.2f} GB ({result['profile']['peak_method']})"
    )
    print(f"({iterations(result)} iterations; seconds are totals, % of all iterations)")
    print(f"{'phase':<44}{'calls':>7}{'seconds':>10}{'% iter':>8}{'entry GB':>9}{'peak GB':>9}")
    for path, stats in result["profile"]["phases"].items():
        indent = "  " * path.count("/")
        in_iteration = path.split("/")[0] in ITERATION and total
        share = f"{100 * stats['seconds'] / (total * iterations(result)):7.1f}%" if in_iteration else ""
        label = indent + path.rsplit("/", 1)[-1]
        memory = f"{stats['entry_rss_gb']:>9.2f}{stats['peak_rss_gb']:>9.2f}"
        print(f"{label:<44}{stats['calls']:>7}{stats['seconds']:>10.2f}{share:>8}{memory}")
    decode = result.get("decode")
    if decode:
        side = decode["side_by_side"]
        limit = side["bare_tokens_per_s"]
        print(
            f"decode (rollouts and proposals): mean batch {decode['mean_batch']:.1f}, "
            f"{decode['mean_attended_length']:.0f} positions; {decode['engine_row_steps_per_s']:.1f} row-steps/s, "
            f"{decode['engine_sampled_tokens_per_s']:.1f} sampled tokens/s"
        )
        print(
            f"decode limit side by side (batch {side['batch']}, {side['length']} positions): bare forward "
            f"{limit:.1f} tokens/s, engine {side['engine_row_steps_per_s']:.1f} row-steps/s = "
            f"{side['engine_row_steps_per_s'] / limit:.0%} of it"
        )


def measure_in_child(script: str, child_args: list[str], overrides: list[str]) -> dict:
    """Run ``script --_child CHILD_ARGS OVERRIDES`` in a fresh process (its own peak memory, its
    own profiler) and return the JSON it prints last; its error output and exit on failure."""
    command = [sys.executable, script, "--_child", *child_args, *overrides]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(done.returncode)
    return json.loads(done.stdout.strip().splitlines()[-1])


def orsd_over_grpo(results: dict[str, dict], groups: list[str], seconds: Callable[[dict], float]) -> dict:
    """ORSD's iteration time over GRPO's, per group of runs (``<group>/grpo``, ``<group>/orsd``), printed."""
    ratios = {}
    for group in groups:
        grpo, orsd = results.get(f"{group}/grpo"), results.get(f"{group}/orsd")
        if grpo and orsd:
            ratios[group] = seconds(orsd) / seconds(grpo)
            print(f"ORSD / GRPO iteration time, {group}: {ratios[group]:.2f}x")
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="demo,long", help=f"comma-separated, of {sorted(CONFIGS)}")
    parser.add_argument("--algos", default="grpo,orsd")
    parser.add_argument("--json", default=None, help="write the measurements to this file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="extra overrides of every run's config")
    parser.add_argument("--_child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        config_name, algo, workdir = args._child
        print(json.dumps(run_child(config_name, algo, args.overrides, Path(workdir))))
        return 0
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="iteration-profile-") as workdir:
        for config_name in args.configs.split(","):
            for algo in args.algos.split(","):
                name = f"{config_name}/{algo}"
                results[name] = measure_in_child(__file__, [config_name, algo, workdir], args.overrides)
                print_result(name, results[name])
    ratios = orsd_over_grpo(results, args.configs.split(","), iteration_seconds)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"configs": CONFIGS, "results": results, "orsd_over_grpo": ratios}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
