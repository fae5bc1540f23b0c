"""bf16 inference on a float32 model (``model.inference_dtype: bfloat16``): speed, and the PPO ratio it starts from.

One policy, its float32 weights unchanged, collects the same rollout batch (same tasks and
seeds) twice: sampling in float32, then in bf16 through autocast. For each batch it reports the
rollout time, and what the first epoch of an update sees: the float32 scoring pass the update
makes (with gradients, as `update_policy` does) against the rollout's log-probs, as the PPO
ratio exp(new - old) over the sampled tokens (mean |ratio - 1|, largest deviation, share
outside GRPO's clip range [0.8, 1.2], approximate KL). Scoring without gradients (ORSD's
replay, its verifier) is timed in both dtypes too.

    .venv/bin/python benchmarks/bf16_inference.py [--env orsd_gym/GuessNumber-v0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import torch

import orsd_gym  # noqa: F401  (registers the envs)
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.models import load_policy
from orsd_gym.rollout import RolloutOptions, collect


def ratio_stats(policy, trajectories, clip: float = 0.2) -> dict[str, float]:
    """The first epoch's PPO ratio: the update's float32 scoring pass vs the rollout log-probs."""
    policy.set_training(True)
    try:
        new = policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories], with_grad=True)
    finally:
        policy.set_training(False)
    log_ratios = []
    for t, scored in zip(trajectories, new, strict=True):
        mask = torch.tensor(t.loss_mask, dtype=torch.bool)
        log_ratios.append((scored.detach() - torch.tensor(t.logprobs))[mask])
    log_ratio = torch.cat(log_ratios)
    ratio = log_ratio.exp()
    return {
        "tokens": int(ratio.numel()),
        "mean_abs_ratio_minus_1": float((ratio - 1).abs().mean()),
        "max_abs_ratio_minus_1": float((ratio - 1).abs().max()),
        "outside_clip_frac": float(((ratio < 1 - clip) | (ratio > 1 + clip)).float().mean()),
        "approx_kl": float((-log_ratio).mean()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="orsd_gym/GuessNumber-v0")
    parser.add_argument("--env-kwargs", default="{}", help="JSON constructor arguments of the env")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--action-format", default="admissible")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(args.model)
    env = gym.make(args.env, **json.loads(args.env_kwargs))
    options = RolloutOptions(max_turns=args.max_turns, action_format=args.action_format)
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        policy.inference_dtype = dtype
        started = time.perf_counter()
        trajectories = collect(
            env,
            policy,
            list(range(args.tasks)),
            group_size=args.group_size,
            sampling=SamplingParams(max_new_tokens=args.max_new_tokens, seed=0),
            options=options,
            seed=0,
        )
        rollout = time.perf_counter() - started
        started = time.perf_counter()
        policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories])
        scoring = time.perf_counter() - started
        policy.inference_dtype = torch.float32
        name = str(dtype).removeprefix("torch.")
        results[name] = {
            "rollout_seconds": rollout,
            "sampled_tokens": sum(sum(t.loss_mask) for t in trajectories),
            "no_grad_scoring_seconds": scoring,
            "first_epoch_ratio": ratio_stats(policy, trajectories),
        }
    env.close()
    for name, r in results.items():
        stats = r["first_epoch_ratio"]
        print(
            f"{name:>9} inference: rollout {r['rollout_seconds']:.1f} s ({r['sampled_tokens']} sampled tokens), "
            f"scoring without grad {r['no_grad_scoring_seconds']:.1f} s; first-epoch PPO ratio: mean |r-1| "
            f"{stats['mean_abs_ratio_minus_1']:.2e}, max {stats['max_abs_ratio_minus_1']:.2e}, outside clip "
            f"{stats['outside_clip_frac']:.3f}, approx KL {stats['approx_kl']:.2e}"
        )
    speed = {
        "rollout": results["float32"]["rollout_seconds"] / results["bfloat16"]["rollout_seconds"],
        "no_grad_scoring": results["float32"]["no_grad_scoring_seconds"]
        / results["bfloat16"]["no_grad_scoring_seconds"],
    }
    print(f"bf16 speed-up: rollout {speed['rollout']:.2f}x, scoring without grad {speed['no_grad_scoring']:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "results": results, "speed_up": speed}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
