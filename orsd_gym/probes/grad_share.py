"""How much of an update's gradient comes from the outcome and how much from ORSD's correction.

ORSD's advantage is the outcome's plus a correction, A_t = A_out_t + corr_t. At the start of an
update (the policy is the one that sampled, so every PPO ratio is 1 and no token is clipped)
the policy-gradient loss is linear in the advantages, and its gradient splits exactly:

    g(A_out + corr) - g(0) = [g(A_out) - g(0)] + [g(A_out + corr) - g(A_out)]
                             outcome term        correction term

`gradient_share` measures both terms on one micro-batch with the algorithm's own loss (so with
its aggregation, normaliser and clipping): their norms and the cosine between them. A
correction norm above the outcome's, with a cosine near 0 or below, means the correction sets
the direction of the step. The ``g(0)`` pass (what the loss does without any advantage: its KL
and entropy terms) is skipped when the loss has neither. The passes run before the update's
first step, whose gradients they leave untouched (cleared).

The passes run as the update does: in train mode (so gradient checkpointing applies when it is
on) but with every dropout off, so that they differ only by their advantages, and on a
micro-batch that the update's memory budget fits (``optim.max_memory_gb``). The parameters'
``.grad``, which the budget counts, accumulates each pass's gradient with the sign its term
needs. Where the budget also has room for one copy of the gradient beside the micro-batch (or
there is no budget), the passes hold one: two passes, three with g(0). Otherwise ``.grad``
alone holds the outcome term, the correction term and their sum in turn, and the cosine follows
from the three norms: three passes, six with g(0). Either way a measurement holds no more than
an update's micro-batch that accumulates into ``.grad`` does, plus that copy where it fits.

`GradientShareProbe` runs `measure_gradient_share` every ``probes.gradient_share.every``
iterations, after the update scored its loss inputs and before its first step: the micro-batch
is drawn (with the iteration's own seeded stream, so a resumed run draws the same) among the
rows with an outcome signal, preferring those that also carry a correction, since a
micro-batch without one has no outcome term to compare against; with no such row the
diagnostic is skipped and says so (``grad_share/skipped``). Each pass is a forward and
backward over that one micro-batch (at most ``optim.micro_batch_tokens`` tokens).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from orsd_gym.algos.base import Algorithm, PreparedBatch
from orsd_gym.policies.base import Policy
from orsd_gym.policies.batching import longest_first, micro_batches
from orsd_gym.profiling import phase
from orsd_gym.train.callbacks import RunContext, TrainerCallback
from orsd_gym.train.seeds import GRAD_SHARE, iteration_rng
from orsd_gym.train.update import activation_budget

#: 1 when the diagnostic was due but no row had an outcome signal (or none fit the memory
#: budget), 0 when it measured.
SKIPPED = "grad_share/skipped"

#: Elements per step of a float64 dot product, so that its temporaries stay far below the size
#: of a gradient (an embedding's is hundreds of MB in float64).
_DOT_CHUNK = 1 << 20

_DROPOUT_MODULES = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
)


def measure_gradient_share(
    policy: Policy,
    algorithm: Algorithm,
    batch: PreparedBatch,
    rng: np.random.Generator,
    *,
    token_budget: int,
    activation_budget: int | None,
) -> dict[str, float]:
    """`gradient_share` on a micro-batch drawn with `sample_micro_batch` under ``token_budget``
    padded tokens and the update's ``activation_budget`` (bytes, None: no memory budget),
    holding a gradient copy where that budget has room for it; with `SKIPPED`."""
    micro = sample_micro_batch(batch, rng, token_budget, _fits(policy, activation_budget))
    if not micro:
        return {SKIPPED: 1.0}
    hold_copy = _room_for_a_copy(policy, batch, micro, activation_budget)
    return gradient_share(policy, algorithm, batch, micro, hold_copy=hold_copy) | {SKIPPED: 0.0}


def _room_for_a_copy(policy: Policy, batch: PreparedBatch, micro: list[int], activation_budget: int | None) -> bool:
    """Whether the passes over ``micro`` may hold a copy of the gradient beside ``.grad`` (and
    save passes) within the update's ``activation_budget`` (None: no memory budget)."""
    if activation_budget is None:
        return True
    longest = max(len(batch.trajectories[i].token_ids) for i in micro)
    return policy.update_activation_bytes(len(micro), longest) + gradient_copy_bytes(policy) <= activation_budget


def gradient_copy_bytes(policy: Policy) -> int:
    """Bytes of one copy of the gradient (as large as the trainable weights)."""
    return sum(p.numel() * p.element_size() for p in policy.trainable_parameters())


def sample_micro_batch(
    batch: PreparedBatch,
    rng: np.random.Generator,
    token_budget: int,
    fits: Callable[[int, int], bool] | None = None,
) -> list[int]:
    """One micro-batch drawn with ``rng`` among those the update's packing (longest first,
    `micro_batches` under ``token_budget`` and ``fits``) makes of the rows with an outcome signal,
    of those that also carry a correction when any does. A row that does not fit on its own is
    left out, since measuring it would break the budget. Empty: no such row."""
    lengths = [len(t.token_ids) for t in batch.trajectories]
    candidates = [i for i in _rows_with_outcome_signal(batch) if fits is None or fits(1, lengths[i])]
    rows = [i for i in candidates if _has_correction(batch, i)] or candidates
    if not rows:
        return []
    by_length = [rows[k] for k in longest_first([lengths[i] for i in rows])]
    chunks = micro_batches(by_length, lengths, token_budget, fits)
    return chunks[int(rng.integers(len(chunks)))]


def _fits(policy: Policy, activation_budget: int | None) -> Callable[[int, int], bool] | None:
    """Whether a micro-batch of (rows, longest) fits ``activation_budget`` (None: no budget)."""
    if activation_budget is None:
        return None
    return lambda rows, length: policy.update_activation_bytes(rows, length) <= activation_budget


def _rows_with_outcome_signal(batch: PreparedBatch) -> list[int]:
    if batch.outcome_advantages is None:  # nothing to split the advantages into
        return []
    return [i for i, advantages in enumerate(batch.outcome_advantages) if bool(advantages.any())]


def _has_correction(batch: PreparedBatch, row: int) -> bool:
    return bool((batch.advantages[row] != batch.outcome_advantages[row]).any())


def gradient_share(
    policy: Policy, algorithm: Algorithm, batch: PreparedBatch, micro: list[int], *, hold_copy: bool = True
) -> dict[str, float]:
    """``grad_share/*``: the outcome's and the correction's gradient norms on ``micro``, their
    ratio and their cosine (empty when the batch has no outcome advantages to split off).
    ``hold_copy``: with one copy of the gradient beside ``.grad`` (2 or 3 passes), else with
    ``.grad`` alone (3 or 6 passes)."""
    if batch.outcome_advantages is None or not micro:
        return {}
    cfg = algorithm.config
    with_zero = getattr(cfg, "kl_coef", 0.0) > 0 or getattr(cfg, "entropy_coef", 0.0) > 0
    passes = _Passes(policy, algorithm, batch, micro, with_zero)
    passes.clear()
    try:
        with _train_mode_without_dropout(policy):
            outcome_sq, correction_sq, cross = passes.with_a_copy() if hold_copy else passes.without_a_copy()
    finally:
        passes.clear()  # the update starts from no gradient
    outcome_norm, correction_norm = math.sqrt(outcome_sq), math.sqrt(correction_sq)
    found = {"grad_share/outcome_norm": outcome_norm, "grad_share/correction_norm": correction_norm}
    if outcome_norm > 0:
        found["grad_share/correction_ratio"] = correction_norm / outcome_norm
    if outcome_norm * correction_norm > 0:  # else there is no angle (e.g. no group had a rubric)
        # Rounding may carry a cosine of two (anti-)parallel terms a hair past 1.
        found["grad_share/cosine"] = max(-1.0, min(1.0, cross / (outcome_norm * correction_norm)))
    return found


@dataclasses.dataclass
class _Passes:
    """The passes over one micro-batch, each accumulating into the parameters' ``.grad`` the
    loss's gradient with some advantages, times a sign. Both ways return the outcome term's and
    the correction term's squared norms and their dot product."""

    policy: Policy
    algorithm: Algorithm
    batch: PreparedBatch
    micro: list[int]
    #: Whether the loss has a gradient without advantages (KL, entropy): g(0), passed too.
    with_zero: bool
    params: list[torch.nn.Parameter] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.params = self.policy.trainable_parameters()

    def clear(self) -> None:
        for param in self.params:
            param.grad = None

    def with_a_copy(self) -> tuple[float, float, float]:
        """``.grad`` takes g(A_out), a copy of it is held, then ``.grad`` turns into -g(A_out)
        and accumulates g(A_out + corr): the correction term. With a g(0) pass the two swap and
        ``.grad`` (g(A_out) again) accumulates -g(0): the outcome term."""
        self._accumulate(self.batch.outcome_advantages)
        held = [grad.clone() for grad in self._gradients()]
        self._negate()
        self._accumulate(self.batch.advantages)
        if self.with_zero:
            for k, param in enumerate(self.params):
                held[k], param.grad = param.grad, held[k]
            self._accumulate(self._zeros(), sign=-1.0)
            outcome, correction = self._gradients(), held
        else:
            outcome, correction = held, self._gradients()
        return _dot(outcome, outcome), _dot(correction, correction), _dot(outcome, correction)

    def without_a_copy(self) -> tuple[float, float, float]:
        """``.grad`` alone holds the outcome term g(A_out) - g(0), then, negated and with
        g(A_out + corr) - g(0) added, the correction term, then with g(A_out) - g(0) added their
        sum; the dot product follows from the three squared norms."""
        self._add_net(self.batch.outcome_advantages)
        outcome_sq = self._squared_norm()
        self._negate()
        self._add_net(self.batch.advantages)
        correction_sq = self._squared_norm()
        self._add_net(self.batch.outcome_advantages)
        sum_sq = self._squared_norm()
        return outcome_sq, correction_sq, (sum_sq - outcome_sq - correction_sq) / 2

    def _add_net(self, advantages: list[torch.Tensor]) -> None:
        """Add g(advantages) - g(0): the loss's gradient less what it has without advantages."""
        self._accumulate(advantages)
        if self.with_zero:
            self._accumulate(self._zeros(), sign=-1.0)

    def _accumulate(self, advantages: list[torch.Tensor], sign: float = 1.0) -> None:
        batch = dataclasses.replace(self.batch, advantages=advantages)
        loss, _ = self.algorithm.loss(self.policy, batch, self.micro, minibatch_indices=self.micro)
        (sign * loss).backward()

    def _gradients(self) -> list[torch.Tensor]:
        """``.grad`` of every trainable parameter (zeros, from now on, where the loss does not
        reach one)."""
        for param in self.params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        return [param.grad for param in self.params]

    def _negate(self) -> None:
        for grad in self._gradients():
            grad.neg_()

    def _squared_norm(self) -> float:
        gradients = self._gradients()
        return _dot(gradients, gradients)

    def _zeros(self) -> list[torch.Tensor]:
        return [torch.zeros_like(a) for a in self.batch.outcome_advantages]


@contextmanager
def _train_mode_without_dropout(policy: Policy) -> Iterator[None]:
    """The policy in train mode, as the update runs it (gradient checkpointing applies only
    there), with its dropout off: torch's dropout modules (LoRA's among them) back in eval mode
    and transformers attention's ``attention_dropout`` rate at 0. Eval mode after, as the policy
    is outside an update."""
    model = getattr(policy, "model", None)
    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else []
    attention = [m for m in modules if isinstance(getattr(m, "attention_dropout", None), float)]
    rates = [m.attention_dropout for m in attention]
    policy.set_training(True)
    try:
        for module in modules:
            if isinstance(module, _DROPOUT_MODULES):
                module.eval()
        for module in attention:
            module.attention_dropout = 0.0
        yield
    finally:
        for module, rate in zip(attention, rates, strict=True):
            module.attention_dropout = rate
        policy.set_training(False)


def _dot(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The dot product of two gradients, in float64."""
    total = 0.0
    for x, y in zip(a, b, strict=True):
        x, y = x.reshape(-1), y.reshape(-1)
        for start in range(0, x.numel(), _DOT_CHUNK):
            end = start + _DOT_CHUNK
            total += float(torch.dot(x[start:end].double(), y[start:end].double()))
    return total


@dataclasses.dataclass
class GradientShareSettings:
    """``probes.gradient_share``: the outcome's and ORSD's correction's share of the gradient."""

    #: Every N iterations, measure the outcome's and ORSD's correction's share of the update's
    #: gradient on one micro-batch with an outcome signal before updating (two to six extra
    #: forward-backward passes, within ``optim.max_memory_gb``); 0: never.
    every: int = 0

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"every must be >= 0, got {self.every}")


class GradientShareProbe(TrainerCallback):
    """``grad_share/*`` (and ``time/grad_share``) every ``every`` iterations, before the update's
    first step (this worker's micro-batch)."""

    section = "gradient_share"
    Settings = GradientShareSettings
    safe_changes = frozenset({"every"})
    settings: GradientShareSettings

    def before_update(self, run: RunContext, batch: PreparedBatch, iteration: int) -> dict[str, Any]:
        every = self.settings.every
        if not every or iteration % every:
            return {}
        optim = run.config.optim
        with phase("grad_share") as timer:
            rng = iteration_rng(run.config.train.seed, iteration, GRAD_SHARE, *run.workers.stream())
            budget = activation_budget(run.policy, run.algorithm, optim)
            share = measure_gradient_share(
                run.policy, run.algorithm, batch, rng, token_budget=optim.micro_batch_tokens, activation_budget=budget
            )
        share["time/grad_share"] = timer.seconds
        return share
