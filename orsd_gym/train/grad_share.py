"""How much of an update's gradient comes from the outcome and how much from ORSD's correction.

ORSD's advantage is the outcome's plus a correction, A_t = A_out_t + corr_t. At the start of an
update (the policy is the one that sampled, so every PPO ratio is 1 and no token is clipped)
the policy-gradient loss is linear in the advantages, and its gradient splits exactly:

    g(A_out + corr) - g(0) = [g(A_out) - g(0)] + [g(A_out + corr) - g(A_out)]
                             outcome term        correction term

`gradient_share` measures both terms on one sampled micro-batch with the algorithm's own loss
(so with its aggregation, normaliser and clipping): their norms and the cosine between them.
A correction norm above the outcome's, with a cosine near 0 or below, means the correction sets
the direction of the step. The ``g(0)`` pass (what the loss does without any advantage: its KL
and entropy terms) is skipped when the loss has neither. The passes run with dropout off, so
they differ only by the advantages, and before the update's first step, whose gradients they
leave untouched (cleared).

Cost: two or three extra forward and backward passes over one micro-batch (at most
``optim.micro_batch_tokens`` tokens), every ``optim.gradient_share_every`` iterations.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from orsd_gym.algos.base import Algorithm, PreparedBatch
from orsd_gym.policies.base import Policy


def gradient_share(policy: Policy, algorithm: Algorithm, batch: PreparedBatch, micro: list[int]) -> dict[str, float]:
    """``grad_share/*``: the outcome's and the correction's gradient norms on ``micro``, their
    ratio and their cosine (empty when the batch has no outcome advantages to split off)."""
    if batch.outcome_advantages is None or not micro:
        return {}
    outcome = batch.outcome_advantages
    passes = {"outcome": outcome, "shaped": batch.advantages}
    cfg = algorithm.config
    if getattr(cfg, "kl_coef", 0.0) > 0 or getattr(cfg, "entropy_coef", 0.0) > 0:
        passes["zero"] = [torch.zeros_like(a) for a in outcome]
    grads = {
        name: _gradient(policy, algorithm, dataclasses.replace(batch, advantages=advantages), micro)
        for name, advantages in passes.items()
    }
    # In place, one tensor at a time: a full model's gradient is as large as its weights.
    g_correction = [s.sub_(o) for s, o in zip(grads.pop("shaped"), grads["outcome"], strict=True)]
    g_outcome = grads.pop("outcome")
    for o, z in zip(g_outcome, grads.pop("zero", []), strict=False):
        o.sub_(z)
    outcome_norm = math.sqrt(_dot(g_outcome, g_outcome))
    correction_norm = math.sqrt(_dot(g_correction, g_correction))
    found = {"grad_share/outcome_norm": outcome_norm, "grad_share/correction_norm": correction_norm}
    if outcome_norm > 0:
        found["grad_share/correction_ratio"] = correction_norm / outcome_norm
    if outcome_norm * correction_norm > 0:  # else there is no angle (e.g. no group had a rubric)
        found["grad_share/cosine"] = _dot(g_outcome, g_correction) / (outcome_norm * correction_norm)
    return found


def sample_micro_batch(micro_batches: list[list[int]], rng: np.random.Generator) -> list[int]:
    """One of the update's micro-batches, drawn with ``rng`` (empty when there is none)."""
    return micro_batches[int(rng.integers(len(micro_batches)))] if micro_batches else []


def _gradient(policy: Policy, algorithm: Algorithm, batch: PreparedBatch, micro: list[int]) -> list[torch.Tensor]:
    """The loss's gradient, one tensor per trainable parameter (taken from the parameters,
    which are left without one)."""
    params = policy.trainable_parameters()
    for param in params:
        param.grad = None
    loss, _ = algorithm.loss(policy, batch, micro, minibatch_indices=micro)
    loss.backward()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    for param in params:
        param.grad = None
    return grads


def _dot(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return sum(float((x.double() * y.double()).sum()) for x, y in zip(a, b, strict=True))
