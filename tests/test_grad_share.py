"""The gradient-share diagnostic: against a hand computation of the policy gradient at ratio 1,
within the update's memory budget, in train mode without dropout, on a micro-batch that
carries an outcome signal."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from algos_helpers import make_group
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile
from transformers.modeling_layers import GradientCheckpointingLayer

from orsd_gym.algos.base import PreparedBatch, make_algorithm
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.probes import grad_share
from orsd_gym.probes.grad_share import (
    GradientShareProbe,
    GradientShareSettings,
    gradient_copy_bytes,
    gradient_share,
    sample_micro_batch,
)
from orsd_gym.train.callbacks import RunContext
from orsd_gym.train.config import Config, OptimConfig
from orsd_gym.train.update import RUNTIME_ALLOWANCE_GB, UpdateStep, activation_budget, make_optimizer, update_policy
from orsd_gym.train.workers import SINGLE


def _measured_update(policy, algorithm, batch, optim, iteration=0, stepper=None):
    """One update with the gradient-share probe due (``every: 1``), as the trainer runs it."""
    optimizer, scheduler = stepper or make_optimizer(policy, optim, total_steps=1)
    run = RunContext(
        config=Config(optim=optim),
        algo_settings=algorithm.config,
        policy=policy,
        algorithm=algorithm,
        workers=SINGLE,
        training_envs=lambda: None,
        evaluate=lambda seed, edit: [],
    )
    probe = GradientShareProbe(GradientShareSettings(every=1))
    return update_policy(
        policy,
        algorithm,
        batch,
        optimizer,
        scheduler,
        optim,
        UpdateStep(seed=0, iteration=iteration),
        lambda: probe.before_update(run, batch, iteration),
    )


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


def _batch(policy, trajectories, outcome, correction=None):
    """A prepared batch at ratio 1 (old log-probs: the policy's own) with these advantages."""
    with torch.no_grad():
        old = policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories])
    shaped = outcome if correction is None else [o + c for o, c in zip(outcome, correction, strict=True)]
    return PreparedBatch(
        trajectories=trajectories,
        rewards=[0.0] * len(trajectories),
        advantages=list(shaped),
        old_logprobs=[lp.detach().float() for lp in old],
        outcome_advantages=list(outcome),
    )


def _per_row(trajectories, values):
    """Each row's value on its sampled tokens (0 on the others)."""
    return [torch.full((len(t.token_ids),), float(v)) * torch.tensor(t.loss_mask) for t, v in zip(trajectories, values)]


def _noise(trajectories, seed, scale=0.3):
    generator = torch.Generator().manual_seed(seed)
    draws = [torch.randn(len(t.token_ids), generator=generator) for t in trajectories]
    return [scale * d * torch.tensor(t.loss_mask) for d, t in zip(draws, trajectories)]


@pytest.fixture(scope="module")
def template(policy):
    """A trajectory whose tokens `_long_rows` replaces."""
    return make_group(policy, group_id=0, task_id=0, successes=[True], seed=5)[0]


def _long_rows(template, rows, length, seed):
    """``rows`` trajectories of ``length`` random tokens, the first 32 of them a prompt."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 49_000, (rows, length), generator=generator).tolist()
    mask = [0] * 32 + [1] * (length - 32)
    return [dataclasses.replace(template, token_ids=t, loss_mask=mask, logprobs=[0.0] * length) for t in tokens]


@pytest.mark.parametrize("hold_copy", [True, False])
@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
def test_gradient_share_equals_the_hand_computed_split(policy, entropy_coef, hold_copy):
    trajectories = make_group(policy, group_id=0, task_id=0, successes=[True, False, False], seed=3)
    outcome = _per_row(trajectories, [1.2, -0.6, -0.6])
    correction = _noise(trajectories, seed=0)
    batch = _batch(policy, trajectories, outcome, correction)
    algorithm = make_algorithm("grpo", {"entropy_coef": entropy_coef})
    found = gradient_share(policy, algorithm, batch, [0, 1, 2], hold_copy=hold_copy)

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
    batch = _batch(policy, trajectories, _per_row(trajectories, [1.0, -1.0]))
    found = gradient_share(policy, make_algorithm("grpo", {}), batch, [0, 1])
    assert found["grad_share/correction_norm"] == 0.0 and "grad_share/cosine" not in found
    assert found["grad_share/outcome_norm"] > 0 and not math.isnan(found["grad_share/outcome_norm"])


# ---------------------------------------------------------------- memory


def _walk(nodes):
    for node in nodes:
        yield node
        yield from _walk(node.children)


def _allocated_peak(run) -> int:
    """The most bytes ``run`` held at once beyond what was allocated when it started, as the CPU
    allocator counts them (torch's profiler records its running total at every allocation):
    exact, where resident memory at this size is blurred by the heap."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        run()
    events = profiler.profiler.kineto_results.experimental_event_tree()
    allocations = sorted(
        (node for node in _walk(events) if node.typed[0] == _EventType.Allocation), key=lambda n: n.start_time_ns
    )
    first = allocations[0].typed[1]
    return max(node.typed[1].total_allocated for node in allocations) - (first.total_allocated - first.alloc_size)


@pytest.fixture(scope="module")
def checkpointed():
    """tiny-random as budgeted updates run it (gradient checkpointing), its LM head in chunks
    small enough that a copy of its gradient, not the logits, is what a pass adds on top."""
    policy = load_policy("tiny-random", settings=PolicySettings(gradient_checkpointing=True))
    policy.logits_chunk = 16
    return policy


@pytest.mark.parametrize("hold_copy", [True, False])
def test_the_passes_hold_what_an_update_micro_batch_holds_and_at_most_one_gradient_copy(
    checkpointed, template, hold_copy
):
    # The update's activation budget covers a micro-batch's forward and backward with the
    # gradient already there (as for every micro-batch after a mini-batch's first); the passes
    # add nothing to that but the one copy they hold where the budget has room for it (with an
    # entropy term, so that its g(0) is passed too).
    policy = checkpointed
    trajectories = _long_rows(template, rows=2, length=64, seed=5)
    batch = _batch(policy, trajectories, _per_row(trajectories, [1.0, -1.0]), _noise(trajectories, seed=1))
    algorithm = make_algorithm("grpo", {"entropy_coef": 0.01})
    micro = [0, 1]
    params = policy.trainable_parameters()

    def update_micro_batch():
        policy.set_training(True)
        try:
            loss, _ = algorithm.loss(policy, batch, micro, minibatch_indices=micro)
            loss.backward()
        finally:
            policy.set_training(False)

    for param in params:
        param.grad = torch.zeros_like(param)
    update = _allocated_peak(update_micro_batch) + gradient_copy_bytes(policy)  # with its .grad
    for param in params:
        param.grad = None
    share = _allocated_peak(lambda: gradient_share(policy, algorithm, batch, micro, hold_copy=hold_copy))
    copy = gradient_copy_bytes(policy) if hold_copy else 0
    assert share <= update + copy + 64 * 1024  # a few scalars' allocations


def test_the_share_stays_within_the_update_memory_budget(policy, template, monkeypatch):
    trajectories = _long_rows(template, rows=3, length=300, seed=6)
    batch = _batch(policy, trajectories, _per_row(trajectories, [1, -1, 1]))
    grpo = make_algorithm("grpo")
    measured = []

    def spy(policy, algorithm, batch, micro, *, hold_copy):
        measured.append((micro, hold_copy))
        return {}

    monkeypatch.setattr(grad_share, "gradient_share", spy)
    copy = gradient_copy_bytes(policy)

    def update_under(budget_bytes: int) -> tuple[dict[str, float], int]:
        # The memory budget whose activation budget is `budget_bytes` (what the update holds
        # besides activations, plus the runtime allowance).
        state = int(1e9) - activation_budget(policy, grpo, OptimConfig(max_memory_gb=RUNTIME_ALLOWANCE_GB + 1.0))
        optim = OptimConfig(lr=1e-9, max_memory_gb=RUNTIME_ALLOWANCE_GB + (budget_bytes + state + 64) / 1e9)
        measured.clear()
        metrics = _measured_update(policy, grpo, batch, optim)
        return metrics, activation_budget(policy, grpo, optim)

    # Room for the three rows, not for a gradient copy beside them: the passes hold none.
    metrics, budget = update_under(policy.update_activation_bytes(3, 300))
    assert measured == [([0, 1, 2], False)] and metrics["grad_share/skipped"] == 0.0
    assert policy.update_activation_bytes(3, 300) <= budget < policy.update_activation_bytes(3, 300) + copy
    # Room for the copy too: held, to save passes.
    metrics, budget = update_under(policy.update_activation_bytes(3, 300) + copy)
    assert measured == [([0, 1, 2], True)]
    # No room for one row: the update runs each anyway, the diagnostic never breaks the budget.
    metrics, budget = update_under(policy.update_activation_bytes(1, 280))
    assert budget < policy.update_activation_bytes(1, 300)
    assert measured == [] and metrics["grad_share/skipped"] == 1.0 and metrics["tokens"] > 0


# ---------------------------------------------------------------- how the passes run


def test_the_passes_run_in_train_mode_with_checkpointing_and_without_dropout():
    policy = load_policy("tiny-random", lora={"dropout": 0.5}, settings=PolicySettings(gradient_checkpointing=True))
    modules = list(policy.model.modules())
    for module in modules:
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.5
    trajectories = make_group(policy, group_id=0, task_id=0, successes=[True, False], seed=7)
    batch = _batch(policy, trajectories, _per_row(trajectories, [1.0, -1.0]), _noise(trajectories, seed=2))
    algorithm = make_algorithm("grpo", {})
    seen = {"layer": set(), "dropout": set()}
    for module in modules:
        if isinstance(module, GradientCheckpointingLayer):  # a decoder layer
            module.register_forward_pre_hook(lambda m, args: seen["layer"].add((m.training, m.gradient_checkpointing)))
        if isinstance(module, torch.nn.Dropout):  # LoRA's
            module.register_forward_pre_hook(lambda m, args: seen["dropout"].add(m.training))

    first = gradient_share(policy, algorithm, batch, [0, 1])
    assert seen == {"layer": {(True, True)}, "dropout": {False}}
    # Dropout at 0.5 everywhere, and still the passes differ only by their advantages.
    assert gradient_share(policy, algorithm, batch, [0, 1]) == first
    assert not policy.model.training
    assert {m.attention_dropout for m in modules if hasattr(m, "attention_dropout")} == {0.5}


# ---------------------------------------------------------------- which micro-batch


@pytest.fixture(scope="module")
def groups(policy):
    """Six rows in index order: a group that all succeeded (no outcome signal, though it has a
    correction), a mixed group without a correction, a mixed group with one."""
    trajectories = [
        *make_group(policy, group_id=0, task_id=0, successes=[True, True], seed=8),
        *make_group(policy, group_id=1, task_id=1, successes=[True, False], seed=9),
        *make_group(policy, group_id=2, task_id=0, successes=[True, False], seed=10),
    ]
    outcome = _per_row(trajectories, [0.0, 0.0, 1.0, -1.0, 1.0, -1.0])
    correction = [c * keep for c, keep in zip(_noise(trajectories, seed=3), [1, 1, 0, 0, 1, 1], strict=True)]
    return trajectories, outcome, correction


def _share_updates(policy, batch, iterations):
    optim = OptimConfig(lr=1e-9, micro_batch_tokens=80)  # about one row each
    stepper = make_optimizer(policy, optim, total_steps=len(iterations))
    grpo = make_algorithm("grpo")
    return [_measured_update(policy, grpo, batch, optim, i, stepper) for i in iterations]


def test_the_measured_micro_batch_carries_the_outcome_and_the_correction(policy, groups):
    trajectories, outcome, correction = groups
    batch = _batch(policy, trajectories, outcome, correction)
    for metrics in _share_updates(policy, batch, range(2)):
        assert metrics["grad_share/skipped"] == 0.0
        assert metrics["grad_share/outcome_norm"] > 0 and metrics["grad_share/correction_norm"] > 0
    # Drawn reproducibly, from the rows with both; without a correction, from the outcome's rows.
    draws = [sample_micro_batch(batch, np.random.default_rng(seed), 80) for seed in range(8)]
    assert {i for micro in draws for i in micro} <= {4, 5}
    assert draws == [sample_micro_batch(batch, np.random.default_rng(seed), 80) for seed in range(8)]
    plain = _batch(policy, trajectories, outcome)
    draws = [sample_micro_batch(plain, np.random.default_rng(seed), 80) for seed in range(8)]
    rows = {i for micro in draws for i in micro}
    assert rows <= {2, 3, 4, 5} and rows & {2, 3}


def test_without_an_outcome_signal_the_diagnostic_is_skipped(policy, groups):
    trajectories, outcome, correction = groups
    batch = _batch(policy, trajectories, [torch.zeros_like(o) for o in outcome], correction)
    (metrics,) = _share_updates(policy, batch, [0])
    assert metrics["grad_share/skipped"] == 1.0
    assert not any(key.startswith("grad_share/") and key != "grad_share/skipped" for key in metrics)
