"""bf16 sampling on a float32 model (``model.inference_dtype: bfloat16``): its speed, the cost of
scoring the old log-probs again in float32, and the PPO ratio the first epoch starts from.

One policy, its float32 weights unchanged, collects the same rollout batch (same tasks and
seeds) twice: sampling in float32, then in bf16 through autocast. For each batch it reports the
rollout time, the time of the no-grad float32 pass that makes PPO's old log-probs
(`orsd_gym.train.update.score_loss_inputs`: none when sampling ran in float32), and the first epoch's
PPO ratio exp(new - old), new from the update's float32 scoring pass with gradients, against
two choices of old: the sampler's own log-probs (what training used before the rescoring pass)
and the rescored ones (what it uses now). Each ratio is summarised over all sampled tokens and
over the decision tokens (sampled with p <= 0.9: the ones whose gradient is not ~0): mean
|log ratio|, share outside GRPO's clip range [0.8, 1.2], approximate KL.

    .venv/bin/python benchmarks/perf/bf16_inference.py [--env orsd_gym/GuessNumber-v0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import torch

import orsd_gym  # noqa: F401  (registers the envs)
from orsd_gym.algos.grpo import sampler_logprobs, samples_as_it_updates
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.models import load_policy
from orsd_gym.rollout import RolloutOptions, collect

DECISION_P = 0.9


def ratio_stats(log_ratio: torch.Tensor, clip: float = 0.2) -> dict[str, float]:
    ratio = log_ratio.exp()
    return {
        "tokens": int(log_ratio.numel()),
        "mean_abs_log_ratio": float(log_ratio.abs().mean()) if log_ratio.numel() else 0.0,
        "outside_clip_frac": float(((ratio < 1 - clip) | (ratio > 1 + clip)).float().mean()) if ratio.numel() else 0.0,
        "approx_kl": float((-log_ratio).mean()) if log_ratio.numel() else 0.0,
    }


def first_epoch(policy, trajectories, olds: dict[str, list[torch.Tensor]]) -> dict[str, dict[str, dict[str, float]]]:
    """Ratio statistics of the update's float32 scoring pass against each choice of old log-probs."""
    policy.set_training(True)
    try:
        new = policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories], with_grad=True)
    finally:
        policy.set_training(False)
    out = {}
    for name, old in olds.items():
        every, decisions = [], []
        for t, scored, previous in zip(trajectories, new, old, strict=True):
            mask = torch.tensor(t.loss_mask, dtype=torch.bool)
            decision = mask & (torch.tensor(t.logprobs).exp() <= DECISION_P)
            log_ratio = scored.detach() - previous
            every.append(log_ratio[mask])
            decisions.append(log_ratio[decision])
        out[name] = {"all": ratio_stats(torch.cat(every)), "decision": ratio_stats(torch.cat(decisions))}
    return out


def rescored_old_logprobs(policy, trajectories) -> tuple[list[torch.Tensor], float]:
    """PPO's old log-probs as training makes them (the sampler's own, or one no-grad pass in the
    update dtype), and their mean |sampler - old| over the sampled tokens."""
    sampled = sampler_logprobs(trajectories)
    if samples_as_it_updates(policy):
        return sampled, 0.0
    tokens, masks = [t.token_ids for t in trajectories], [t.loss_mask for t in trajectories]
    old = [s.detach().cpu() for s in policy.score(tokens, masks, precision="update")]
    gap = sum(float((a - b).abs().sum()) for a, b in zip(sampled, old, strict=True))
    return old, gap / max(1, sum(sum(m) for m in masks))


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
        )
        rollout = time.perf_counter() - started
        started = time.perf_counter()
        rescored, gap = rescored_old_logprobs(policy, trajectories)
        rescoring = time.perf_counter() - started
        policy.inference_dtype = torch.float32
        sampled = sampler_logprobs(trajectories)
        name = str(dtype).removeprefix("torch.")
        results[name] = {
            "rollout_seconds": rollout,
            "sampled_tokens": sum(sum(t.loss_mask) for t in trajectories),
            "old_logprob_pass_seconds": rescoring,
            "sampler_logprob_gap": gap,
            "first_epoch": first_epoch(policy, trajectories, {"sampler_old": sampled, "training_old": rescored}),
        }
    env.close()
    for name, r in results.items():
        print(
            f"{name:>9} sampling: rollout {r['rollout_seconds']:.1f} s ({r['sampled_tokens']} sampled tokens), "
            f"old log-prob pass {r['old_logprob_pass_seconds']:.1f} s, "
            f"mean |sampler - float32| {r['sampler_logprob_gap']:.2e}"
        )
        for old, sides in r["first_epoch"].items():
            for side, s in sides.items():
                print(
                    f"    ratio vs {old:<12} {side:>8} tokens ({s['tokens']:>4}): "
                    f"mean |log r| {s['mean_abs_log_ratio']:.2e}, outside clip {s['outside_clip_frac']:.3f}, "
                    f"approx KL {s['approx_kl']:.2e}"
                )
    fp32, bf16 = results["float32"], results["bfloat16"]
    speed = {
        "rollout": fp32["rollout_seconds"] / bf16["rollout_seconds"],
        "rollout_with_old_logprob_pass": fp32["rollout_seconds"]
        / (bf16["rollout_seconds"] + bf16["old_logprob_pass_seconds"]),
    }
    print(
        f"bf16 speed-up: rollout {speed['rollout']:.2f}x, rollout plus the float32 old log-prob pass "
        f"{speed['rollout_with_old_logprob_pass']:.2f}x"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": vars(args), "results": results, "speed_up": speed}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
