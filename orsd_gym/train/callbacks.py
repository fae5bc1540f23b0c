"""What a run's probes (measurements beside training) hook into: the trainer's callbacks.

The trainer runs what it is handed (``Trainer(config, callbacks=...)``) at fixed points of a
run and names none of them; a callback reads its settings from its own config section,
``probes.<section>``, and returns metrics the trainer logs with the iteration's (in the spirit
of transformers' ``TrainerCallback``). The built-in probes (the teacher test, the gradient
share, rubric demonstrations) live in `orsd_gym.probes`, which also says which a config asks
for (``probes_for``); an algorithm's own probe subclasses `TrainerCallback` without touching
this package.

Every hook runs on every data-parallel worker (a probe that plays episodes plays its share);
what a hook returns counts on worker 0, which writes the records.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from orsd_gym.errors import ConfigError

if TYPE_CHECKING:
    from orsd_gym.algos.base import Algorithm, PreparedBatch
    from orsd_gym.policies.base import Policy
    from orsd_gym.rollout.collector import PromptEdit
    from orsd_gym.rollout.trajectory import Trajectory
    from orsd_gym.train.config import Config
    from orsd_gym.train.workers import Workers


@dataclass(frozen=True)
class RunContext:
    """What a callback may use of the run: its settings, models and envs, and its evaluation."""

    config: Config
    #: The algorithm's resolved settings (`orsd_gym.train.config.resolve_algo`).
    algo_settings: Any
    policy: Policy
    algorithm: Algorithm
    workers: Workers
    #: The training side's envs (made on first use).
    training_envs: Callable[[], Any]
    #: ``evaluate(seed, edit)``: the evaluation's episodes played again with ``seed`` and a prompt
    #: edit (every worker plays its share; worker 0 gets all, the others nothing).
    evaluate: Callable[[int, PromptEdit | None], list[Trajectory]]


class TrainerCallback:
    """A probe: hooks the trainer calls, each doing nothing unless overridden.

    ``section`` names the config section the callback reads (``probes.<section>``, None: none)
    and ``Settings`` its dataclass; the trainer records the resolved settings with the run's
    (``config.yaml``), so a resumed run is refused when they changed."""

    section: ClassVar[str | None] = None
    Settings: ClassVar[type | None] = None
    #: Settings of the section a resumed run may change when the caller allows it: those that
    #: only measure (their own seed streams, nothing trained on them).
    safe_changes: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, settings: Any = None) -> None:
        self.settings = settings if settings is not None or self.Settings is None else self.Settings()

    def check_config(self, config: Config, algo_settings: Any) -> None:
        """Raise `ConfigError` when ``config`` cannot give what the probe needs (before anything loads)."""

    def demonstration_edit(self, config: Config, count: int) -> PromptEdit | None:
        """A prompt edit of the warm start's ``count`` demonstrations (group ``n``: demonstration ``n``)."""
        return None

    def after_prepare(self, run: RunContext, batch: PreparedBatch, iteration: int) -> dict[str, float]:
        """After the algorithm prepared this worker's ``batch``, before the update: metrics."""
        return {}

    def before_update(self, run: RunContext, batch: PreparedBatch, iteration: int) -> dict[str, float]:
        """After the update scored its loss inputs, before its first step (only when it updates): metrics."""
        return {}

    def after_evaluation(
        self, run: RunContext, baseline: Sequence[Trajectory], iteration: int
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """After an evaluation (``baseline``: its episodes on worker 0, none elsewhere): metrics
        for ``eval.jsonl`` and a record for ``<section>.jsonl`` (without a section: the class
        name; empty: none)."""
        return {}, {}


def settings_record(callbacks: Sequence[TrainerCallback], *, defaults: bool = False) -> dict[str, dict[str, Any]]:
    """``section -> settings`` of the callbacks that have a section (``defaults``: their defaults):
    the ``probes`` of a run's record."""
    return {
        cb.section: dataclasses.asdict(type(cb.settings)() if defaults else cb.settings)
        for cb in callbacks
        if cb.section is not None
    }


def safe_changes(callbacks: Sequence[TrainerCallback]) -> frozenset[str]:
    """The dotted keys (``probes.<section>.<setting>``) the callbacks let a resumed run change."""
    return frozenset(f"probes.{cb.section}.{name}" for cb in callbacks if cb.section for name in cb.safe_changes)


def demonstration_edit(callbacks: Sequence[TrainerCallback], config: Config, count: int) -> PromptEdit | None:
    """The one edit of the warm start's ``count`` demonstrations the callbacks give (None: none)."""
    edits = [edit for edit in (cb.demonstration_edit(config, count) for cb in callbacks) if edit is not None]
    if len(edits) > 1:
        raise ConfigError("more than one probe edits the warm start's demonstrations: turn all but one off")
    return edits[0] if edits else None


def check_sections(probes: Mapping[str, Any], callbacks: Sequence[TrainerCallback]) -> None:
    """Every ``probes.<section>`` of the config is read by one of ``callbacks`` (a setting no
    callback reads would be ignored without a word)."""
    sections = sorted(cb.section for cb in callbacks if cb.section is not None)
    for name in probes:
        if name not in sections:
            close = difflib.get_close_matches(str(name), sections, n=1)
            hint = f"did you mean 'probes.{close[0]}'?" if close else f"read: {', '.join(sections) or 'none'}"
            raise ConfigError(
                f"probes.{name}: no probe of this run reads it ({hint}); the built-in probes come with "
                "orsd_gym.probes.probes_for(config)"
            )
