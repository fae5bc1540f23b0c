"""Rubric demonstrations: the warm start's instruction tuning for rubrics.

A model that was never taught to follow guidance in its context cannot be helped by a rubric
there (ORSD's teacher would play no better than its student). ``probes.rubric_demonstrations.share``
teaches it: that share of the warm start's demonstrations (a seeded draw) shows the task's
expert rubric in context (where ORSD's replay puts it), the rest none, so the cloned policy
learns that a rubric tells it what to do. The teacher test (`orsd_gym.probes.teacher`)
measures whether it did. Every arm of a comparison gets the same warm start, so it changes the
starting policy, not the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from orsd_gym.probes.teacher import RubricContext
from orsd_gym.rollout.collector import PromptEdit
from orsd_gym.train.callbacks import TrainerCallback


@dataclass
class RubricDemonstrationSettings:
    """``probes.rubric_demonstrations``: warm-start demonstrations with their task's expert rubric."""

    #: Share of the warm start's demonstrations played with their task's expert rubric in
    #: context (the env's plan restated, as ORSD's positive control writes it), so the policy
    #: learns that a rubric in context says what to do: instruction tuning for rubrics.
    share: float = 0.0
    #: Where those demonstrations carry the rubric (as ORSD's replay's rubric_placement).
    placement: Literal["system", "user"] = "system"
    #: Criteria the demonstrations' rubrics keep (as ORSD's max_criteria).
    max_criteria: int = 4

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"share is a fraction of the demonstrations, in [0, 1], got {self.share}")
        if self.max_criteria < 1:
            raise ValueError(f"max_criteria must be >= 1, got {self.max_criteria}")


class RubricDemonstrations(TrainerCallback):
    """The warm start's demonstration edit: ``share`` of them with their expert rubric."""

    section = "rubric_demonstrations"
    Settings = RubricDemonstrationSettings
    settings: RubricDemonstrationSettings

    def demonstration_edit(self, config: Any, count: int) -> PromptEdit | None:
        """The edit of ``count`` demonstrations: those of a seeded draw (the demonstrations'
        seed) get their task's expert rubric; None when none does."""
        seed = config.warm_start.demonstration_seed(config.train.seed)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0xBC, 2]))
        with_rubric = {int(i) for i in rng.permutation(count)[: round(self.settings.share * count)]}
        if not with_rubric:
            return None
        context = RubricContext(placement=self.settings.placement, max_criteria=self.settings.max_criteria)
        env_id = config.env.id.rpartition(":")[2]  # without a "module:" prefix
        return context.edit(lambda info, group: context.expert_rubric(info, env_id) if group in with_rubric else None)
