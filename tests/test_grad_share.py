"""The gradient-share diagnostic against a hand computation of the policy gradient at ratio 1."""

from __future__ import annotations

import math

import pytest
import torch
from algos_helpers import make_group

from orsd_gym.algos.base import PreparedBatch, make_algorithm
from orsd_gym.train.grad_share import gradient_share


def _flat_gradient(policy, trajectories, advantages, tokens):
    """d/dtheta of -sum_t A_t log p(y_t) / tokens: GRPO's token-mean loss where every ratio is 1."""
    for param in policy.trainable_parameters():
        param.grad = None
    logprobs = policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories], with_grad=True)
    loss = -sum((a * lp * torch.tensor(t.loss_mask)).sum() for a, lp, t in zip(advantages, logprobs, trajectories))
    (loss / tokens).backward()
    flat = torch.cat([p.grad.flatten().double() for p in policy.trainable_parameters()])
    for param in policy.trainable_parameters():
        param.grad = None
    return flat


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
def test_gradient_share_equals_the_hand_computed_split(policy, entropy_coef):
    trajectories = make_group(policy, group_id=0, task_id=0, successes=[True, False, False], seed=3)
    with torch.no_grad():
        old = policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories])
    generator = torch.Generator().manual_seed(0)
    outcome = [
        torch.full((len(t.token_ids),), a) * torch.tensor(t.loss_mask) for t, a in zip(trajectories, [1.2, -0.6, -0.6])
    ]
    correction = [
        0.3 * torch.randn(len(t.token_ids), generator=generator) * torch.tensor(t.loss_mask) for t in trajectories
    ]
    batch = PreparedBatch(
        trajectories=trajectories,
        rewards=[1.0, 0.0, 0.0],
        advantages=[o + c for o, c in zip(outcome, correction)],
        old_logprobs=[lp.detach().float() for lp in old],
        outcome_advantages=outcome,
    )
    algorithm = make_algorithm("grpo", {"entropy_coef": entropy_coef})
    found = gradient_share(policy, algorithm, batch, [0, 1, 2])

    tokens = sum(sum(t.loss_mask) for t in trajectories)
    g_outcome = _flat_gradient(policy, trajectories, outcome, tokens)
    g_correction = _flat_gradient(policy, trajectories, correction, tokens)
    assert found["grad_share/outcome_norm"] == pytest.approx(float(g_outcome.norm()), rel=1e-3)
    assert found["grad_share/correction_norm"] == pytest.approx(float(g_correction.norm()), rel=1e-3)
    cosine = float(g_outcome @ g_correction / (g_outcome.norm() * g_correction.norm()))
    assert found["grad_share/cosine"] == pytest.approx(cosine, abs=1e-3)
    assert found["grad_share/correction_ratio"] == pytest.approx(
        found["grad_share/correction_norm"] / found["grad_share/outcome_norm"]
    )
    assert all(p.grad is None for p in policy.trainable_parameters())  # the update starts clean


def test_no_correction_has_no_angle(policy):
    trajectories = make_group(policy, group_id=0, task_id=1, successes=[True, False], seed=4)
    outcome = [
        torch.full((len(t.token_ids),), a) * torch.tensor(t.loss_mask) for t, a in zip(trajectories, [1.0, -1.0])
    ]
    with torch.no_grad():
        old = policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories])
    batch = PreparedBatch(
        trajectories, [1.0, 0.0], list(outcome), [lp.float() for lp in old], outcome_advantages=outcome
    )
    found = gradient_share(policy, make_algorithm("grpo", {}), batch, [0, 1])
    assert found["grad_share/correction_norm"] == 0.0 and "grad_share/cosine" not in found
    assert found["grad_share/outcome_norm"] > 0 and not math.isnan(found["grad_share/outcome_norm"])
