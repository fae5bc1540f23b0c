"""Judging a group's candidate bundles: the frozen verifier scores every attempt against every
criterion, and one bundle is selected by how well its scores follow the rewards."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from orsd_gym.algos.orsd.groups import GroupWork
from orsd_gym.algos.orsd.rubrics import render_attempt
from orsd_gym.algos.orsd.selection import bundle_correlations, select_bundle, select_random_bundle
from orsd_gym.algos.orsd.sources import APPLIED_WITHOUT_SELECTION
from orsd_gym.algos.orsd.verifier import Judgement, Verifier
from orsd_gym.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from orsd_gym.algos.orsd.config import ORSDConfig


def verify(verifier: Verifier, groups: list[GroupWork], trajs: list[Trajectory], config: ORSDConfig) -> None:
    """Every group's ``scores``: per bundle and attempt, the mean of the verifier's P("yes") over
    the bundle's criteria (one batch of judgements for all groups)."""
    if not groups:
        return
    cfg = config
    judgements, where = [], []
    for n, group in enumerate(groups):
        rendered = [
            render_attempt(trajs[i], max_obs_chars=cfg.attempt_max_obs_chars, max_steps=cfg.attempt_max_steps)
            for i in group.attempts
        ]
        for k, bundle in enumerate(group.bundles):
            for criterion in bundle:
                for g, attempt in enumerate(rendered):
                    judgements.append(Judgement(group.task, attempt, criterion))
                    where.append((n, k, g))
    values = verifier.score(judgements)
    sums = [np.zeros((len(g.bundles), len(g.attempts))) for g in groups]
    for (n, k, g), value in zip(where, values, strict=True):
        sums[n][k, g] += value
    for group, total in zip(groups, sums, strict=True):
        counts = np.array([len(b) for b in group.bundles], dtype=np.float64)[:, None]
        group.scores = (total / counts).tolist()


def select(group: GroupWork, config: ORSDConfig, rng: np.random.Generator) -> None:
    """The group's ``selected`` bundle (a control's one bundle as it is; else by alignment of its
    scores with the rewards, or at random: the ablation) and, without one, the reason."""
    cfg = config
    if not group.bundles:
        group.reason = group.reason if group.reason else "no well-formed bundle"
        return
    assert group.scores is not None
    group.correlations = bundle_correlations(group.scores, group.rewards)
    if cfg.rubric_source in APPLIED_WITHOUT_SELECTION and (cfg.rubric_source == "expert" or group.lent_from):
        # A control applies its one bundle whatever its alignment (recorded in the audit).
        group.selected = 0
    elif cfg.selection == "random":
        group.selected = select_random_bundle(group.scores, group.rewards, rng)
    else:
        group.selected = select_bundle(group.scores, group.rewards, cfg.min_corr)
    if group.selected is None:
        if all(c is None for c in group.correlations):
            group.reason = "no bundle's scores vary across attempts"
        else:
            group.reason = f"best correlation not above min_corr={cfg.min_corr}"
