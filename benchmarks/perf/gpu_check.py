"""GPU check: a collect, a GRPO and an ORSD iteration on `tiny-random` on CUDA in bf16.

The precision is the GPU presets': float32 master weights, sampling and updates computing in
bf16 through autocast. Checks device placement (every parameter, every returned score on the
device), dtypes (float32 weights, bf16 compute, float32 log-probs), that the updates change the
weights and keep them finite, and that
ORSD selects a rubric and replays it; prints tokens/s per phase and the peak GPU memory.
Exits non-zero on any error or failed check.

    python benchmarks/perf/gpu_check.py                       # CUDA, bf16
    python benchmarks/perf/gpu_check.py --device cpu          # smoke test of the script without a GPU
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import numpy as np
import torch

import orsd_gym  # noqa: F401  (registers the envs)
from orsd_gym.algos import make_algorithm
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.models import load_policy
from orsd_gym.rollout import EnvSetup, RolloutOptions, collect
from orsd_gym.train.config import OptimConfig
from orsd_gym.train.update import UpdateStep, make_optimizer, update_policy

ENV = "orsd_gym/GuessNumber-v0"


class CheckFailed(AssertionError):
    pass


def check(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def peak_memory_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(device_name: str, dtype: str) -> dict:
    device = torch.device(device_name)
    if device.type == "cuda":
        check(torch.cuda.is_available(), "CUDA is not available to torch")
        torch.cuda.reset_peak_memory_stats(device)
    policy = load_policy("tiny-random", device=device_name, dtype="float32", inference_dtype=dtype, update_dtype=dtype)
    expected = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[dtype]
    check(all(p.device.type == device.type for p in policy.model.parameters()), "a parameter is off the device")
    check(all(p.dtype == torch.float32 for p in policy.model.parameters()), "a master weight is not float32")
    check(policy.dtype == policy.update_dtype == expected, f"sampling or updates do not compute in {dtype}")
    results: dict = {"device": str(device), "dtype": dtype, "torch": torch.__version__}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)

    # 1. collect
    synchronize(device)
    started = time.perf_counter()
    trajectories = collect(
        EnvSetup(ENV, kwargs={"high": 10}),
        policy,
        list(range(4)),
        group_size=4,
        sampling=SamplingParams(max_new_tokens=16, seed=0),
        options=RolloutOptions(max_turns=4, action_format="admissible"),
    )
    synchronize(device)
    seconds = time.perf_counter() - started
    sampled = sum(sum(t.loss_mask) for t in trajectories)
    check(len(trajectories) == 16 and sampled > 0, "collect returned no sampled tokens")
    check(all(np.isfinite(t.logprobs).all() for t in trajectories), "non-finite rollout log-probs")
    results["collect"] = {"seconds": seconds, "sampled_tokens_per_s": sampled / seconds}

    scores = policy.score([t.token_ids for t in trajectories[:2]], [t.loss_mask for t in trajectories[:2]])
    check(all(s.device.type == device.type and s.dtype == torch.float32 for s in scores), "score off device/dtype")

    # 2. and 3. one GRPO and one ORSD iteration on those trajectories. A random model never
    # wins, so half of each group is marked a success: every group then has an advantage to
    # learn from. A random model writes no parsable rubric, so ORSD runs offline from given
    # bundles (its verifier, selection with min_corr=-1 and replay then all run).
    for t in trajectories:
        t.success = t.episode_id % 2 == 0
    reward = {"outcome": "success"}
    algos = {
        "grpo": make_algorithm("grpo", {"reward": reward}),
        "orsd": make_algorithm(
            "orsd", {"reward": reward, "rubric_mode": "offline", "min_corr": -1.0}, verifier=policy.copy_frozen()
        ),
    }
    bundles = [["The agent guesses a number in every turn.", "The agent narrows the range after each hint."]] * 2
    # Offline bundles are keyed by the task key the env reports at reset.
    keys = {t.infos[0]["task_key"] for t in trajectories}
    algos["orsd"].load_state_dict({"offline_bundles": {key: bundles for key in keys}})
    optim = OptimConfig(lr=1e-3, micro_batch_tokens=2048)
    tokens = sum(len(t.token_ids) for t in trajectories)
    for name, algorithm in algos.items():
        before = [p.detach().clone() for p in policy.trainable_parameters()]
        synchronize(device)
        started = time.perf_counter()
        batch = algorithm.prepare(trajectories, policy, iteration=0, rng=np.random.default_rng(0))
        synchronize(device)
        prepare = time.perf_counter() - started
        optimizer, scheduler = make_optimizer(policy, optim, total_steps=1)
        started = time.perf_counter()
        losses = update_policy(policy, algorithm, batch, optimizer, scheduler, optim, UpdateStep(seed=0, iteration=0))
        synchronize(device)
        update = time.perf_counter() - started
        after = policy.trainable_parameters()
        check(all(torch.isfinite(p).all() for p in after), f"{name}: non-finite weights after the update")
        check(any(not torch.equal(a, b) for a, b in zip(after, before, strict=True)), f"{name}: weights unchanged")
        check(all(np.isfinite(v) for v in losses.values()), f"{name}: non-finite loss metrics {losses}")
        results[name] = {
            "prepare_seconds": prepare,
            "update_seconds": update,
            "update_tokens_per_s": tokens / update,
            "grad_norm": losses["grad_norm"],
        }
        if name == "orsd":
            check(batch.metrics["orsd/rubric_frac"] > 0, "ORSD selected no rubric (with min_corr=-1)")
            results[name]["rubric_frac"] = batch.metrics["orsd/rubric_frac"]
            results[name].update({k: v for k, v in batch.metrics.items() if k.startswith("time/orsd")})
    results["peak_gpu_memory_gb"] = peak_memory_gb(device)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a smoke test of the script)")
    parser.add_argument(
        "--dtype",
        default="bfloat16",
        choices=["bfloat16", "float32", "float16"],
        help="what sampling and updates compute in",
    )
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args()
    try:
        results = run(args.device, args.dtype)
    except Exception:  # any failure is the check's result: report it and exit non-zero
        traceback.print_exc()
        print("GPU CHECK FAILED", file=sys.stderr)
        return 1
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    print("GPU CHECK PASSED" if results["device"].startswith("cuda") else "check passed (not on a GPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
