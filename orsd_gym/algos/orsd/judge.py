"""Judging a group's candidate bundles: the frozen verifier scores every attempt against every
criterion, and one bundle is selected by how well its scores follow the rewards."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from orsd_gym.algos.orsd.groups import BatchView, Candidates, Group, Judged, Verdict
from orsd_gym.algos.orsd.rubrics import render_attempt
from orsd_gym.algos.orsd.selection import bundle_correlations, select_bundle, select_random_bundle
from orsd_gym.algos.orsd.verifier import Judgement, Verifier
from orsd_gym.policies.base import Policy

if TYPE_CHECKING:
    from orsd_gym.algos.orsd.config import ORSDConfig

#: Per bundle and attempt, the verifier's mean score over the bundle's criteria.
Scores = list[list[float]]


class Judge:
    """Verifies candidates with the frozen verifier (``verifier_for`` the policy) and selects."""

    def __init__(self, config: ORSDConfig, verifier_for: Callable[[Policy], Verifier]) -> None:
        self.config = config
        self.verifier_for = verifier_for

    def verify(self, groups: Sequence[Group], candidates: Sequence[Candidates], view: BatchView) -> list[Scores | None]:
        """Every group's scores (None where it has no bundle), in one batch of judgements."""
        cfg = self.config
        verifier = self.verifier_for(view.policy)
        judged = [n for n, found in enumerate(candidates) if found.bundles]
        scores: list[Scores | None] = [None] * len(groups)
        if not judged:
            return scores
        judgements, where = [], []
        for n in judged:
            group = groups[n]
            rendered = [
                render_attempt(
                    view.trajectories[i], max_obs_chars=cfg.attempt_max_obs_chars, max_steps=cfg.attempt_max_steps
                )
                for i in group.attempts
            ]
            for k, bundle in enumerate(candidates[n].bundles):
                for criterion in bundle:
                    for g, attempt in enumerate(rendered):
                        judgements.append(Judgement(group.task, attempt, criterion))
                        where.append((n, k, g))
        values = verifier.score(judgements)
        sums = {n: np.zeros((len(candidates[n].bundles), len(groups[n].attempts))) for n in judged}
        for (n, k, g), value in zip(where, values, strict=True):
            sums[n][k, g] += value
        for n, total in sums.items():
            counts = np.array([len(b) for b in candidates[n].bundles], dtype=np.float64)[:, None]
            scores[n] = (total / counts).tolist()
        return scores

    def select(self, group: Group, candidates: Candidates, scores: Scores | None, rng: np.random.Generator) -> Verdict:
        """The selected bundle (a control's one bundle as it is; else by alignment of its scores
        with the rewards, or at random: the ablation) and, without one, the reason."""
        cfg = self.config
        if not candidates.bundles:
            return Verdict(reason=candidates.reason or "no well-formed bundle")
        assert scores is not None
        correlations = bundle_correlations(scores, group.rewards)
        if candidates.applied:
            selected = 0
        elif cfg.selection == "random":
            selected = select_random_bundle(scores, group.rewards, rng)
        else:
            selected = select_bundle(scores, group.rewards, cfg.min_corr)
        reason = ""
        if selected is None:
            if all(c is None for c in correlations):
                reason = "no bundle's scores vary across attempts"
            else:
                reason = f"best correlation not above min_corr={cfg.min_corr}"
        return Verdict(scores, correlations, selected, reason)

    def select_each(
        self,
        groups: Sequence[Group],
        candidates: Sequence[Candidates],
        scores: Sequence[Scores | None],
        rng: np.random.Generator,
    ) -> list[Judged]:
        """Every group with its candidates and the verdict on them, in order."""
        return [
            Judged(group, found, self.select(group, found, score, rng))
            for group, found, score in zip(groups, candidates, scores, strict=True)
        ]
