"""One policy update on a prepared rollout batch: epochs, mini-batches, micro-batches.

``optim.epochs`` passes over the batch, each split into ``optim.minibatches`` mini-batches (a
fresh permutation per pass, from the run's seed); a mini-batch is one optimiser step whose
gradient is accumulated micro-batch by micro-batch, each micro-batch at most
``optim.micro_batch_tokens`` padded tokens (the same budget the policy's own scoring uses), then
clipped to ``optim.grad_clip``. The policy is in train mode (dropout on, e.g. LoRA's) only
while it updates. The trainer and the benchmarks both call `update_policy`.

Data-parallel workers (`orsd_gym.train.workers`) each split their own batch into the same
number of mini-batches and all-reduce the accumulated gradients before clipping, so every
optimiser step is one step on the union of the workers' mini-batches, clipped by its global
norm, and the replicas stay identical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from orsd_gym.algos.base import Algorithm, PreparedBatch
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory
from orsd_gym.train.config import OptimConfig
from orsd_gym.train.seeds import UPDATE, iteration_rng
from orsd_gym.train.workers import SINGLE, Workers


def update_policy(
    policy: Policy,
    algorithm: Algorithm,
    batch: PreparedBatch,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    optim: OptimConfig,
    *,
    seed: int,
    iteration: int,
    workers: Workers = SINGLE,
) -> dict[str, float]:
    """Run the update; returns the loss metrics averaged over trajectories (of every worker)
    and the mean grad norm."""
    policy.set_training(True)
    try:
        return _optimise(policy, algorithm, batch, optimizer, scheduler, optim, seed, iteration, workers)
    finally:
        policy.set_training(False)


def _optimise(
    policy, algorithm, batch, optimizer, scheduler, optim: OptimConfig, seed: int, iteration: int, workers: Workers
):
    n = len(batch.trajectories)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    grad_norms = []
    for epoch in range(optim.epochs):
        order = iteration_rng(seed, iteration, UPDATE, epoch, *workers.stream()).permutation(n)
        for minibatch in np.array_split(order, min(optim.minibatches, n)):
            minibatch = [int(i) for i in minibatch]
            optimizer.zero_grad(set_to_none=True)
            for micro in micro_batches(minibatch, batch.trajectories, optim.micro_batch_tokens):
                loss, metrics = algorithm.loss(policy, batch, micro, minibatch_indices=minibatch)
                loss.backward()
                for key, value in metrics.items():
                    sums[key] = sums.get(key, 0.0) + float(value) * len(micro)
                    counts[key] = counts.get(key, 0) + len(micro)
            params = policy.trainable_parameters()
            workers.all_reduce_gradients(params, algorithm.minibatch_weight(batch, minibatch))
            norm = torch.nn.utils.clip_grad_norm_(params, optim.grad_clip if optim.grad_clip > 0 else math.inf)
            grad_norms.append(float(norm))
            optimizer.step()
            scheduler.step()
    sums = workers.sum(sums)
    counts = workers.sum(counts)
    out = {key: sums[key] / counts[key] for key in sums}
    out["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
    return out


def micro_batches(indices: Sequence[int], trajectories: Sequence[Trajectory], token_budget: int) -> list[list[int]]:
    """Split ``indices`` into consecutive groups whose padded size (rows x longest) fits the budget."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in indices:
        length = len(trajectories[index].token_ids)
        if current and max(longest, length) * (len(current) + 1) > token_budget:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


def make_optimizer(policy: Policy, optim: OptimConfig, total_steps: int):
    """AdamW on the trainable parameters and its learning-rate schedule over ``total_steps``."""
    params = policy.trainable_parameters()
    if not params:
        raise ValueError("the policy has no trainable parameters")
    optimizer = torch.optim.AdamW(
        params, lr=optim.lr, betas=(optim.beta1, optim.beta2), weight_decay=optim.weight_decay
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(optim, max(1, total_steps)))


def _schedule(optim: OptimConfig, total_steps: int):
    def factor(step: int) -> float:
        if optim.warmup_steps and step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        progress = min(1.0, (step - optim.warmup_steps) / max(1, total_steps - optim.warmup_steps))
        if optim.scheduler == "linear":
            return max(0.0, 1.0 - progress)
        if optim.scheduler == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return factor
