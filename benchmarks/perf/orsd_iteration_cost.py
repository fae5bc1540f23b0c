"""Wall time of one ORSD iteration vs one GRPO iteration on identical rollouts, by phase.

One batch of rollouts is collected once; then each algorithm runs its iteration on exactly
those trajectories, starting from the same weights: ``prepare`` (GRPO: rewards and
advantages; ORSD: the same plus rubric proposal, verification, selection, privileged replay,
shaping) and the update (micro-batched loss/backward and one AdamW step per mini-batch).
Weights and optimiser are reset between runs. An iteration's time includes the shared
rollout, since that is what a training iteration costs; the ratio without it is printed too.

    .venv/bin/python benchmarks/perf/orsd_iteration_cost.py                      # smollm2-135m on GuessNumber
    .venv/bin/python benchmarks/perf/orsd_iteration_cost.py --model tiny-random  # seconds, for a smoke run

Goal: ORSD <= 1.5x GRPO per iteration.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

import orsd_gym  # noqa: F401  (registers the envs)
from orsd_gym.algos import make_algorithm
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.rollout import RolloutOptions
from orsd_gym.rollout.collector import collect
from orsd_gym.train.config import OptimConfig
from orsd_gym.train.update import UpdateStep, make_optimizer, update_policy


@dataclass
class Timing:
    prepare: float
    update: float
    phases: dict[str, float]
    metrics: dict[str, float]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="orsd_gym/GuessNumber-v0")
    parser.add_argument("--env-kwargs", default="{}", help="JSON constructor arguments of the env")
    parser.add_argument("--tasks", type=int, default=4, help="task groups per iteration")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--action-format", default="admissible", help="the collector's action parser")
    parser.add_argument("--repeats", type=int, default=2, help="timed repetitions of each algorithm (median kept)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--invalid-action-penalty",
        type=float,
        default=0.1,
        help="reward penalty per invalid action (both algorithms): it makes outcomes of a weak model differ "
        "within a group, and ORSD only does work on groups with mixed rewards",
    )
    parser.add_argument("--orsd", default="{}", help="JSON overrides of the ORSD config")
    parser.add_argument(
        "--verifier-dtype", default=None, help="what the verifier holds and computes in (model.verifier_dtype)"
    )
    parser.add_argument("--json", default=None, help="also write the measurements to this file")
    return parser.parse_args()


def run_iteration(algo, policy, trajectories, optim: OptimConfig, rng_seed: int) -> Timing:
    started = time.perf_counter()
    batch = algo.prepare(trajectories, policy, iteration=0, rng=np.random.default_rng(rng_seed))
    prepare = time.perf_counter() - started
    started = time.perf_counter()
    optimizer, scheduler = make_optimizer(policy, optim, total_steps=1)
    update_policy(policy, algo, batch, optimizer, scheduler, optim, UpdateStep(seed=rng_seed, iteration=0))
    update = time.perf_counter() - started
    phases = {k: v for k, v in batch.metrics.items() if k.startswith("time/")}
    metrics = {k: v for k, v in batch.metrics.items() if k.startswith("orsd/")}
    return Timing(prepare, update, phases, metrics)


def main() -> int:
    args = parse_args()
    torch.set_num_threads(args.threads)
    policy = load_policy(args.model, device=args.device, settings=PolicySettings(seed=args.seed))
    verifier = policy.copy_frozen(args.verifier_dtype)
    env = gym.make(args.env, **json.loads(args.env_kwargs))
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed)
    started = time.perf_counter()
    trajectories = collect(
        env,
        policy,
        list(range(args.tasks)),
        group_size=args.group_size,
        sampling=sampling,
        options=RolloutOptions(max_turns=args.max_turns, action_format=args.action_format),
    )
    rollout = time.perf_counter() - started
    tokens = sum(sum(t.loss_mask) for t in trajectories)
    successes = [t.success for t in trajectories]
    print(
        f"rollout: {len(trajectories)} trajectories, {tokens} model tokens, "
        f"success {np.mean(successes):.2f}, {rollout:.2f}s"
    )

    probe = make_algorithm("grpo", {"reward": {"invalid_action_penalty": args.invalid_action_penalty}})
    zero_frac = probe.prepare(trajectories, policy, iteration=0, rng=np.random.default_rng(0)).metrics[
        "zero_adv_group_frac"
    ]
    print(f"groups with mixed rewards: {1 - zero_frac:.2f} (ORSD proposes, verifies and replays only for these)")
    initial_weights = copy.deepcopy(policy.state_dict())
    common = {"reward": {"invalid_action_penalty": args.invalid_action_penalty}}
    algos = {
        "grpo": lambda: make_algorithm("grpo", common),
        "orsd": lambda: make_algorithm("orsd", {**common, **json.loads(args.orsd)}, verifier=verifier),
    }
    # The trainer's update: one AdamW step over the batch, micro-batched under the token budget.
    optim = OptimConfig(lr=1e-6, micro_batch_tokens=4096)
    results: dict[str, list[Timing]] = {name: [] for name in algos}
    for repeat in range(args.repeats):
        for name, build in algos.items():
            policy.load_state_dict(copy.deepcopy(initial_weights))
            results[name].append(run_iteration(build(), policy, trajectories, optim, rng_seed=args.seed + repeat))

    def median(name: str, get) -> float:
        return statistics.median(get(t) for t in results[name])

    summary = {}
    for name in algos:
        prepare, update = median(name, lambda t: t.prepare), median(name, lambda t: t.update)
        summary[name] = {"rollout": rollout, "prepare": prepare, "update": update, "total": rollout + prepare + update}
        summary[name]["phases"] = {
            k: median(name, lambda t, k=k: t.phases.get(k, 0.0)) for k in results[name][0].phases
        }
    print(f"\n{'phase':<26}{'GRPO s':>10}{'ORSD s':>10}")
    for key in ("rollout", "prepare", "update", "total"):
        print(f"{key:<26}{summary['grpo'][key]:>10.3f}{summary['orsd'][key]:>10.3f}")
    for key, value in summary["orsd"]["phases"].items():
        print(f"  {key:<24}{'':>10}{value:>10.3f}")
    ratio = summary["orsd"]["total"] / summary["grpo"]["total"]
    no_rollout = (summary["orsd"]["prepare"] + summary["orsd"]["update"]) / (
        summary["grpo"]["prepare"] + summary["grpo"]["update"]
    )
    orsd_record = algos["orsd"]().config
    orsd_metrics = results["orsd"][0].metrics
    print(f"\nORSD / GRPO per iteration: {ratio:.2f}x (goal <= 1.5x); excluding the shared rollout: {no_rollout:.2f}x")
    print(
        f"(model {args.model}, env {args.env}, {args.tasks}x{args.group_size} attempts, K={orsd_record.num_bundles}, "
        f"M={orsd_record.max_criteria}, {args.threads} threads, device {args.device}, "
        f"verifier {args.verifier_dtype or 'float32'})"
    )
    print("ORSD: " + ", ".join(f"{k.split('/')[1]}={v:.3g}" for k, v in orsd_metrics.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "args": vars(args),
                    "summary": summary,
                    "ratio": ratio,
                    "ratio_without_rollout": no_rollout,
                    "orsd_metrics": orsd_metrics,
                },
                handle,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
