"""The interface the trainer drives, and the registry that makes ``algo: <name>`` one config key.

An `Algorithm` sees Trajectories and a policy that can score tokens; it never steps an env.
Per rollout batch the trainer calls `Algorithm.prepare` once (advantages and any per-token
terms, computed without gradients), then `Algorithm.loss` once per micro-batch for every
mini-batch and epoch, backpropagating each micro-batch loss before the next.

In a data-parallel run every worker prepares its own share of the batch's groups; what an
algorithm must know of the other shares while preparing (ORSD's negative control lends rubrics
between tasks) it exchanges through the `Peers` it is given.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch

from orsd_gym import configio
from orsd_gym.errors import UnknownAlgorithmError
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory

T = TypeVar("T")


class Peers(Protocol):
    """The data-parallel workers preparing the other shares of a batch (`SOLO` when alone)."""

    def all_gather(self, value: T) -> list[T]:
        """Every worker's ``value``, in rank order (the rank order is the order of the groups)."""


class _Solo:
    def all_gather(self, value: T) -> list[T]:
        return [value]


#: The peers of a single process: itself.
SOLO: Peers = _Solo()


@dataclass
class PreparedBatch:
    """Everything `Algorithm.loss` needs for one rollout batch, plus what to log and audit."""

    trajectories: list[Trajectory]
    #: Scalar reward per trajectory after the reward config.
    rewards: list[float]
    #: Per trajectory, float32, ``len == len(token_ids)``, 0 where ``loss_mask == 0``.
    advantages: list[torch.Tensor]
    #: PPO's old log-probs (same shape as `advantages`): the sampler's own, until the update
    #: scores them where `unscored` says so.
    old_logprobs: list[torch.Tensor]
    metrics: dict[str, float] = field(default_factory=dict)
    #: JSON-safe per-group records (ORSD: bundles, correlations, selected rubric, delta stats).
    audit: list[dict[str, Any]] = field(default_factory=list)
    #: The outcome's advantage per token before any correction (GRPO's; what ORSD shapes and the
    #: gradient-share diagnostic splits off). None: `advantages` are the outcome's.
    outcome_advantages: list[torch.Tensor] | None = None
    #: The frozen reference's log-probs of the sampled tokens, in the update dtype: the KL
    #: term's input (None without a KL term, and until the update scores them).
    ref_logprobs: list[torch.Tensor] | None = None
    #: What `Algorithm.loss` compares its forward with that is still to be scored ("old_logprobs",
    #: "ref_logprobs"). In a 16-bit update dtype a row's log-probs depend on the rows it is padded
    #: with, and only the update knows its micro-batches, so it scores these before its first
    #: step, micro-batch by micro-batch with the rows `loss` will get (`Algorithm.score_loss_inputs`):
    #: the first step's ratio is then exactly 1 and its KL exactly 0.
    unscored: frozenset[str] = frozenset()
    #: Per-token values for inspection only (e.g. ORSD's ``orsd_delta``), each a list aligned
    #: with `trajectories`; no loss reads them.
    token_extras: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.trajectories)
        for name in ("rewards", "advantages", "old_logprobs", "outcome_advantages", "ref_logprobs"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"PreparedBatch.{name} has {len(value)} entries for {n} trajectories")

    def inspection(self) -> dict[str, list[torch.Tensor]]:
        """Every per-token series of the batch by name, as an audit records them (``advantages``,
        ``grpo_advantage`` for the outcome's, ``ref_logprobs`` once scored, and the extras)."""
        series = {**self.token_extras, "advantages": self.advantages}
        if self.outcome_advantages is not None:
            series["grpo_advantage"] = self.outcome_advantages
        if self.ref_logprobs is not None:
            series["ref_logprobs"] = self.ref_logprobs
        return series


class Algorithm(ABC):
    """Advantages + loss over groups of trajectories. Subclasses set `name` and `config_class`."""

    name: ClassVar[str]
    #: A dataclass whose field defaults are the documented defaults of the algorithm; its
    #: ``needs_reference`` / ``needs_verifier`` say which frozen policies to pass.
    config_class: ClassVar[type]
    #: Keys of `PreparedBatch.metrics` that are totals (summed over data-parallel workers);
    #: the others are means over groups or episodes (averaged, weighted by groups) or
    #: ``time/`` durations (the slowest worker's).
    summed_metrics: ClassVar[frozenset[str]] = frozenset()
    #: Named variants a comparison arm can select as ``<name>:<variant>`` (ORSD's controls,
    #: ``orsd:expert``): variant -> the settings it stands for, under any the arm adds.
    variants: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: What a comparison report keeps of each run's metrics for this algorithm: the run
    #: summary's key -> the metric whose mean over iterations it holds (None in a run that
    #: logged none, e.g. another algorithm's). `signal_lines` reads them.
    run_summaries: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def signal_lines(cls, summary: Mapping[str, Any]) -> list[str]:
        """The lines this algorithm adds to a comparison report's learning-signal section, from
        the report's summary (``runs``: run name -> its summary, ``algos``: the arms)."""
        return []

    def __init__(self, config: Any = None, *, reference: Policy | None = None, verifier: Policy | None = None) -> None:
        self.config = coerce_config(self.config_class, config)
        self.reference = reference
        self.verifier = verifier

    @abstractmethod
    def prepare(
        self,
        trajectories: Sequence[Trajectory],
        policy: Policy,
        *,
        iteration: int,
        rng: np.random.Generator,
        peers: Peers = SOLO,
    ) -> PreparedBatch:
        """Rewards, per-token advantages and extras of a rollout batch (no gradients); ``peers``
        are the workers preparing the rest of the batch in a data-parallel run."""

    @abstractmethod
    def loss(
        self,
        policy: Policy,
        batch: PreparedBatch,
        micro_indices: Sequence[int],
        *,
        minibatch_indices: Sequence[int],
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Loss of the micro-batch ``micro_indices``, normalised over ``minibatch_indices``.

        Summing the gradients of every micro-batch's loss of a mini-batch equals the gradient
        of the mini-batch loss.
        """

    def score_loss_inputs(self, policy: Policy, batch: PreparedBatch, micro_batches: Sequence[Sequence[int]]) -> None:
        """Score ``batch.unscored`` without gradients, each micro-batch exactly as `loss` will
        score it (same rows, same order, same dtype), then mark them scored. ``micro_batches``
        hold every row of the batch once. The update calls it with its first epoch's micro-batches
        before its first step; a caller that runs `loss` itself calls it first with its own. An
        algorithm whose `prepare` leaves nothing unscored need not override it."""
        if batch.unscored:
            raise NotImplementedError(
                f"{type(self).__name__} cannot score the {sorted(batch.unscored)} it left unscored"
            )

    def has_learning_signal(self, batch: PreparedBatch) -> bool:
        """Whether an update on ``batch`` can move the policy: some token has a non-zero
        advantage. Where no worker's batch has one, the trainer skips the update instead of
        paying for a zero-gradient step (an algorithm with other loss terms says so here)."""
        return any(bool(a.any()) for a in batch.advantages)

    def minibatch_weight(self, batch: PreparedBatch, minibatch_indices: Sequence[int]) -> float:
        """What `loss` divides a mini-batch's summed loss by (its trajectory count by default).

        Data-parallel workers weight their gradients by it, so the combined step is the one a
        single process takes on the union of their mini-batches (`orsd_gym.train.workers`).
        """
        return float(len(minibatch_indices))

    def merge_worker_states(self, states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """One state from the `state_dict` of every data-parallel worker (in rank order), which
        every worker then loads; by default the states must already agree."""
        if any(dict(state) != dict(states[0]) for state in states[1:]):
            raise ValueError(f"{type(self).__name__}'s state differs between workers; override merge_worker_states")
        return dict(states[0])

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe algorithm state a checkpoint must keep (none by default)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state, got keys {sorted(state)}")


# --------------------------------------------------------------------------- registry

ALGORITHMS: dict[str, type[Algorithm]] = {}

A = TypeVar("A", bound=type[Algorithm])


def register_algorithm(cls: A) -> A:
    """Class decorator: make ``cls`` available as ``algo: cls.name``."""
    if cls.name in ALGORITHMS and ALGORITHMS[cls.name] is not cls:
        raise ValueError(f"algorithm name {cls.name!r} is already registered by {ALGORITHMS[cls.name].__qualname__}")
    ALGORITHMS[cls.name] = cls
    return cls


def _lookup(name: str) -> type[Algorithm]:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise UnknownAlgorithmError(
            f"unknown algorithm {name!r}; registered: {', '.join(sorted(ALGORITHMS)) or '(none)'}"
        ) from None


def registered_algorithms() -> list[str]:
    """The names ``algo.name`` accepts, sorted."""
    return sorted(ALGORITHMS)


def algorithm_config_class(name: str) -> type:
    """The config dataclass of the algorithm registered as ``name``."""
    return _lookup(name).config_class


def algorithm_variants() -> dict[str, dict[str, Any]]:
    """Every declared variant (`Algorithm.variants`) as ``"<name>:<variant>"`` -> its settings."""
    return {
        f"{name}:{variant}": dict(settings)
        for name in registered_algorithms()
        for variant, settings in ALGORITHMS[name].variants.items()
    }


def declared_run_summaries() -> dict[str, str]:
    """Every registered algorithm's `Algorithm.run_summaries`, as one map."""
    return {key: metric for name in registered_algorithms() for key, metric in ALGORITHMS[name].run_summaries.items()}


def registered_signal_lines(summary: Mapping[str, Any]) -> list[str]:
    """Every registered algorithm's `Algorithm.signal_lines` for a report's summary, in name order."""
    return [line for name in registered_algorithms() for line in ALGORITHMS[name].signal_lines(summary)]


def make_algorithm(
    name: str,
    config: Any = None,
    *,
    reference: Policy | None = None,
    verifier: Policy | None = None,
) -> Algorithm:
    """Build the algorithm ``name`` from a config dataclass, a (nested) dict, or None (defaults)."""
    return _lookup(name)(config, reference=reference, verifier=verifier)


# --------------------------------------------------------------------------- configs

C = TypeVar("C")


def coerce_config(cls: type[C], config: Any, *, prefix: str = "") -> C:
    """``config`` as an instance of the dataclass ``cls`` (None: defaults; a mapping is validated
    key by key by `orsd_gym.configio`, so a bad key or value raises `ConfigError` naming it)."""
    if config is None:
        return cls()
    if isinstance(config, cls):
        return config
    return configio.from_dict(cls, config, prefix=prefix)
