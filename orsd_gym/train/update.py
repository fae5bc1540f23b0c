"""One policy update on a prepared rollout batch: epochs, mini-batches, micro-batches.

``optim.epochs`` passes over the batch, each split into ``optim.minibatches`` mini-batches (a
fresh permutation per pass, from the run's seed); a mini-batch is one optimiser step whose
gradient is accumulated micro-batch by micro-batch, each micro-batch at most
``optim.micro_batch_tokens`` padded tokens (the same budget the policy's own scoring uses) and,
under a memory budget (``optim.max_memory_gb``), no more rows than its estimated activations
allow (`activation_budget`), then clipped to ``optim.grad_clip``. The policy is in train mode
(dropout on, e.g. LoRA's) only while it updates. The trainer and the benchmarks both call `update_policy`.

Before anything runs the loss, the update scores what `prepare` left to it (`score_loss_inputs`:
PPO's old log-probs unless they are the sampler's own, the KL reference's) with its first
epoch's micro-batches: in a 16-bit update dtype a row's log-probs depend on how far its
micro-batch pads it, so only the update's own packing makes the first step's ratio exactly 1.

Data-parallel workers (`orsd_gym.train.workers`) each split their own batch into the same
number of mini-batches and all-reduce the accumulated gradients before clipping, so every
optimiser step is one step on the union of the workers' mini-batches, clipped by its global
norm, and the replicas stay identical.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from orsd_gym.algos.base import Algorithm, PreparedBatch
from orsd_gym.errors import ConfigError, MemoryBudgetError
from orsd_gym.policies.base import Policy
from orsd_gym.policies.batching import longest_first, micro_batches
from orsd_gym.profiling import phase
from orsd_gym.train.config import OptimConfig
from orsd_gym.train.seeds import UPDATE, iteration_rng
from orsd_gym.train.workers import SINGLE, Workers


@dataclass(frozen=True)
class UpdateStep:
    """Where in the run an update is: the run's seed and iteration (its mini-batch order and
    every other draw of the update), and this process's place among the data-parallel workers."""

    seed: int
    iteration: int
    workers: Workers = SINGLE


def update_policy(
    policy: Policy,
    algorithm: Algorithm,
    batch: PreparedBatch,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    optim: OptimConfig,
    step: UpdateStep,
    before_steps: Callable[[], dict[str, float]] | None = None,
) -> dict[str, float]:
    """Run the update; returns the loss metrics as means over the sampled tokens of every
    micro-batch, mini-batch and epoch (of every worker; ``tokens``: their total), and the mean
    grad norm. ``before_steps`` runs once the loss inputs are scored and before the first step
    (the trainer's probes, e.g. `orsd_gym.probes.grad_share`); its metrics join the update's.
    ``algo/sampler_logprob_gap``: see `sampler_logprob_gap`."""
    # Before anything runs the loss, a probe's included.
    score_loss_inputs(policy, algorithm, batch, optim, step)
    measured = before_steps() if before_steps is not None else {}
    policy.set_training(True)
    try:
        return _optimise(policy, algorithm, batch, (optimizer, scheduler), optim, step) | measured
    finally:
        policy.set_training(False)


def update_or_skip(
    policy: Policy,
    algorithm: Algorithm,
    batch: PreparedBatch,
    stepper: tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler],
    optim: OptimConfig,
    step: UpdateStep,
    before_steps: Callable[[], dict[str, float]] | None = None,
) -> dict[str, float]:
    """`update_policy` where some worker's batch has a learning signal and every worker's a
    model token, else `skip_update`; with ``skipped`` and ``no_model_tokens`` either way.

    Decided together: every worker takes part in an update's all-reduces, or none does. A batch
    without a model token has no loss to differentiate, whatever the algorithm (and a worker
    without one could not take part in the others' all-reduces)."""
    optimizer, scheduler = stepper
    workers = step.workers
    tokens = all(workers.all_gather(has_model_tokens(batch)))
    if tokens and any(workers.all_gather(algorithm.has_learning_signal(batch))):
        losses = update_policy(policy, algorithm, batch, optimizer, scheduler, optim, step, before_steps)
        return losses | {"skipped": 0.0, "no_model_tokens": 0.0}
    return skip_update(scheduler, optim, len(batch.trajectories), no_model_tokens=not tokens)


def has_model_tokens(batch: PreparedBatch) -> bool:
    """Whether any sample of ``batch`` holds a token the model sampled (one it can learn on):
    none does when every episode ran out of budget before the model's first turn."""
    return any(any(t.loss_mask) for t in batch.trajectories)


def skip_update(
    scheduler: torch.optim.lr_scheduler.LRScheduler, optim: OptimConfig, rows: int, *, no_model_tokens: bool = False
) -> dict[str, float]:
    """What an update with no learning signal anywhere does instead of zero-gradient steps (which
    would still move the weights through AdamW's momentum and weight decay): nothing, but the
    learning-rate schedule advances by the steps it would have taken, so it stays tied to the
    iteration. Returns the update's metrics: ``skipped``, and ``no_model_tokens`` when no
    batch held a token the model sampled (an update then has no loss to take a gradient of)."""
    with warnings.catch_warnings():
        # torch warns when a schedule advances before any optimiser step; skipping one is why.
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
        for _ in range(optim.epochs * min(optim.minibatches, max(rows, 1))):
            scheduler.step()
    return {"skipped": 1.0, "no_model_tokens": float(no_model_tokens)}


def score_loss_inputs(
    policy: Policy, algorithm: Algorithm, batch: PreparedBatch, optim: OptimConfig, step: UpdateStep
) -> None:
    """Score what `prepare` left unscored (`PreparedBatch.unscored`), without gradients and
    before the first step, micro-batch by micro-batch with exactly the first epoch's
    micro-batches: every row is padded as in the loss's forward, so in a 16-bit update dtype
    both round alike and the first step's ratio is exactly 1 and its KL exactly 0. (Later epochs
    pack their rows afresh, and with them that dtype's padding noise.) Call it in eval mode, so
    that dropout leaves the old log-probs alone."""
    if not batch.unscored:
        return
    lengths = [len(t.token_ids) for t in batch.trajectories]
    plan = _epoch_plan(lengths, optim, _fits(policy, algorithm, optim), step, 0)
    with phase("loss_inputs"):
        algorithm.score_loss_inputs(policy, batch, [micro for _, micros in plan for micro in micros])


def sampler_logprob_gap(batch: PreparedBatch, workers: Workers = SINGLE) -> float:
    """Mean |sampling-time - old| log-prob over the sampled tokens of every worker's batch: how
    far the sampler's numbers are from what the loss compares with (0 where they are the same)."""
    gap = tokens = 0.0
    for trajectory, old in zip(batch.trajectories, batch.old_logprobs, strict=True):
        mask = torch.as_tensor(trajectory.loss_mask, dtype=torch.bool)
        sampled = torch.as_tensor(trajectory.logprobs, dtype=torch.float32)
        gap += float((sampled[mask] - old[mask]).abs().sum())
        tokens += float(mask.sum())
    total = workers.sum({"gap": gap, "tokens": tokens})
    return total["gap"] / max(total["tokens"], 1.0)


def _epoch_plan(
    lengths: list[int], optim: OptimConfig, fits: Callable[[int, int], bool] | None, step: UpdateStep, epoch: int
) -> list[tuple[list[int], list[list[int]]]]:
    """An epoch's mini-batches (a fresh permutation from the run's seed), each with its
    micro-batches. Longest first: a micro-batch pads its rows to its longest, so rows of similar
    length go together (per-step samples differ by a page); the sum is the same."""
    order = iteration_rng(step.seed, step.iteration, UPDATE, epoch, *step.workers.stream()).permutation(len(lengths))
    plan = []
    for minibatch in np.array_split(order, min(optim.minibatches, len(lengths))):
        minibatch = [int(i) for i in minibatch]
        by_length = [minibatch[i] for i in longest_first([lengths[j] for j in minibatch])]
        plan.append((minibatch, micro_batches(by_length, lengths, optim.micro_batch_tokens, fits)))
    return plan


def _optimise(
    policy: Policy,
    algorithm: Algorithm,
    batch: PreparedBatch,
    stepper: tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler],
    optim: OptimConfig,
    step: UpdateStep,
) -> dict[str, float]:
    optimizer, scheduler = stepper
    workers = step.workers
    fits = _fits(policy, algorithm, optim)
    lengths = [len(t.token_ids) for t in batch.trajectories]
    sums: dict[str, float] = {}
    grad_norms = []
    for epoch in range(optim.epochs):
        for minibatch, micros in _epoch_plan(lengths, optim, fits, step, epoch):
            optimizer.zero_grad(set_to_none=True)
            for micro in micros:
                loss, metrics = algorithm.loss(policy, batch, micro, minibatch_indices=minibatch)
                with phase("backward"):
                    loss.backward()
                # Per-token means count by tokens, whatever rows a memory budget put together
                # (an algorithm that reports no token count is weighted by rows).
                weight = float(metrics.pop("tokens", len(micro)))
                sums["tokens"] = sums.get("tokens", 0.0) + weight
                for key, value in metrics.items():
                    sums[key] = sums.get(key, 0.0) + float(value) * weight
            with phase("optimizer"):
                params = policy.trainable_parameters()
                workers.all_reduce_gradients(params, algorithm.minibatch_weight(batch, minibatch))
                norm = torch.nn.utils.clip_grad_norm_(params, optim.grad_clip if optim.grad_clip > 0 else math.inf)
                grad_norms.append(float(norm))
                optimizer.step()
                scheduler.step()
    # The gradients are not needed until the next update: free them for the rollout between.
    optimizer.zero_grad(set_to_none=True)
    sums = workers.sum(sums)
    total = sums.get("tokens", 0.0)
    out = {key: value if key == "tokens" else value / max(total, 1.0) for key, value in sums.items()}
    out["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
    # An algorithm's metric ("algo/", as `prepare`'s), measured here where the old log-probs are final.
    out["algo/sampler_logprob_gap"] = sampler_logprob_gap(batch, workers)
    return out


def _fits(policy: Policy, algorithm: Algorithm, optim: OptimConfig) -> Callable[[int, int], bool] | None:
    """Whether a micro-batch of (rows, longest) fits the memory budget (None: no budget)."""
    budget = activation_budget(policy, algorithm, optim)
    return None if budget is None else lambda rows, length: policy.update_activation_bytes(rows, length) <= budget


#: What a training process holds besides the model's weights, gradients, optimiser state and
#: frozen copies: the interpreter, torch and transformers, the tokenizer and envs, a rollout's
#: KV cache (sized from the demo's measured parts: benchmarks/README.md).
RUNTIME_ALLOWANCE_GB = 0.8


def memory_left(policy: Policy, algorithm: Algorithm | None, optim: OptimConfig) -> int | None:
    """Bytes ``optim.max_memory_gb`` leaves for what one update micro-batch or one `generate`
    call adds (None without a memory budget): the budget less `RUNTIME_ALLOWANCE_GB` and what a
    training process holds throughout, `training_state_bytes` (without ``algorithm``: only the
    policy's weights, as an evaluation alone holds)."""
    if optim.max_memory_gb is None:
        return None
    held = policy.weight_bytes() if algorithm is None else training_state_bytes(policy, algorithm)
    return int((optim.max_memory_gb - RUNTIME_ALLOWANCE_GB) * 1e9) - held


def training_state_bytes(policy: Policy, algorithm: Algorithm) -> int:
    """The weights, their gradients and AdamW's two moments, autocast's copies of the weights
    in a narrower update dtype, and the algorithm's frozen models."""
    trainable = sum(p.numel() * p.element_size() for p in policy.trainable_parameters())
    frozen = sum(m.weight_bytes() for m in (algorithm.reference, algorithm.verifier) if m is not None)
    return policy.weight_bytes() + policy.update_weight_copy_bytes() + 3 * trainable + frozen


def activation_budget(policy: Policy, algorithm: Algorithm, optim: OptimConfig) -> int | None:
    """Bytes one micro-batch's forward and backward may add under ``optim.max_memory_gb``
    (`memory_left`; None without a memory budget); a budget that leaves no room for one
    256-token sequence fails here."""
    budget = memory_left(policy, algorithm, optim)
    if budget is None:
        return None
    smallest = policy.update_activation_bytes(1, 256)
    if budget < smallest:
        state = training_state_bytes(policy, algorithm)
        raise MemoryBudgetError(
            f"optim.max_memory_gb={optim.max_memory_gb} leaves {budget / 1e9:.2f} GB for an update's activations "
            f"(weights, their update-dtype copies, gradients, optimiser state and frozen models take "
            f"{state / 1e9:.2f} GB, the runtime "
            f"{RUNTIME_ALLOWANCE_GB} GB), less than one 256-token sequence needs ({smallest / 1e9:.2f} GB); raise it, "
            "or turn on model.gradient_checkpointing or model.lora.enabled"
        )
    return budget


def check_trainable_precision(policy: Policy) -> None:
    """Refuse trainable weights held in a 16-bit dtype: an AdamW step moves a weight by about
    lr, and bfloat16 keeps 8 bits of mantissa, so any step below 2^-8 of the weight rounds away
    (at lr 1e-6 nearly all of them). Mixed precision keeps float32 master weights instead."""
    narrow = sorted({str(p.dtype) for p in policy.trainable_parameters() if p.dtype.itemsize < 4})
    if narrow:
        raise ConfigError(
            f"the trainable weights are held in {', '.join(narrow)}: AdamW's updates round away on 16-bit weights "
            "(a step changes a weight only when it exceeds 2^-8 of it in bfloat16). Hold them in float32 and compute "
            "in 16 bits (model.dtype=float32 model.update_dtype=bfloat16 model.inference_dtype=bfloat16), or train "
            "LoRA adapters (model.lora.enabled=true)"
        )


def make_optimizer(policy: Policy, optim: OptimConfig, total_steps: int):
    """AdamW on the trainable parameters and its learning-rate schedule over ``total_steps``.

    Under a memory budget (``optim.max_memory_gb``) AdamW updates one tensor at a time: its
    multi-tensor ("foreach") step holds temporaries as large as all the weights together, which
    made the step the peak of an update (benchmarks/README.md); one tensor at a time costs
    little of a CPU update's time."""
    params = policy.trainable_parameters()
    if not params:
        raise ValueError("the policy has no trainable parameters")
    check_trainable_precision(policy)
    optimizer = torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=(optim.beta1, optim.beta2),
        weight_decay=optim.weight_decay,
        foreach=_foreach(optim),
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(optim, max(1, total_steps)))


def apply_optim_settings(
    optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LambdaLR, optim: OptimConfig
) -> None:
    """Put ``optim``'s settings over an optimiser and schedule restored from a checkpoint, which
    carry the settings they were saved with: a resume that allows ``optim.*`` to change trains
    with the new ones from its first step (AdamW's moments and the step count are kept)."""
    factor = scheduler.lr_lambdas[0](scheduler.last_epoch)
    scheduler.base_lrs = [optim.lr] * len(optimizer.param_groups)
    for group in optimizer.param_groups:
        group.update(
            initial_lr=optim.lr,
            lr=optim.lr * factor,
            betas=(optim.beta1, optim.beta2),
            weight_decay=optim.weight_decay,
            foreach=_foreach(optim),
        )
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


def _foreach(optim: OptimConfig) -> bool | None:
    # See make_optimizer: one tensor at a time under a memory budget.
    return False if optim.max_memory_gb is not None else None


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
