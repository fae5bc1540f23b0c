"""What ORSD records of a batch: one audit record per group and the batch's ``orsd/*`` metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from orsd_gym.algos.base import PreparedBatch
from orsd_gym.algos.orsd.alignment import credit_alignment
from orsd_gym.algos.orsd.groups import Judged, knows_expert_actions, masked_deltas
from orsd_gym.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from orsd_gym.algos.orsd.config import ORSDConfig


def audit_record(
    judged: Judged, deltas: list[torch.Tensor], trajs: list[Trajectory], iteration: int, config: ORSDConfig
) -> dict:
    """The group's record in the audit (`groups.json`): its attempts, rewards, bundles, scores,
    selection, and where its delta went."""
    group, found, verdict = judged.group, judged.candidates, judged.verdict
    selected = verdict.selected
    record: dict[str, Any] = {
        "iteration": iteration,
        "group_id": group.group_id,
        "task": group.task,
        "task_key": group.task_key,
        "trajectory_indices": group.indices,
        "attempt_indices": group.attempts,
        "rewards": group.rewards,
        "rubric_mode": config.rubric_mode,
        "rubric_source": config.rubric_source,
        "lent_from": found.lent_from,
        "bundles": found.bundles,
        "malformed_bundles": found.malformed,
        "malformed_texts": found.malformed_texts,
        "scores": verdict.scores,
        "correlations": verdict.correlations,
        "selected": selected,
        "selected_rubric": judged.rubric,
        "selected_correlation": (
            verdict.correlations[selected] if selected is not None and verdict.correlations is not None else None
        ),
        "no_rubric_reason": verdict.reason if selected is None else None,
    }
    if selected is not None:
        values = masked_deltas(deltas, trajs, group.indices)
        record["delta"] = {
            "tokens": int(values.numel()),
            "mean": float(values.mean()) if values.numel() else 0.0,
            "abs_mean": float(values.abs().mean()) if values.numel() else 0.0,
            "min": float(values.min()) if values.numel() else 0.0,
            "max": float(values.max()) if values.numel() else 0.0,
            "clipped_frac": float((values.abs() > config.delta_clip).float().mean()) if values.numel() else 0.0,
        }
        if knows_expert_actions(trajs[group.indices[0]]):
            shaped = [trajs[i] for i in group.indices]
            record["credit_alignment"] = credit_alignment(shaped, [deltas[i] for i in group.indices])
    return record


def batch_metrics(
    groups: list[Judged], deltas: list[torch.Tensor], trajs: list[Trajectory], config: ORSDConfig
) -> dict[str, float]:
    """``orsd/*`` metrics of one batch: how often a rubric was selected, how well it aligned, how
    big the deltas were and where they went."""
    active = [g.candidates for g in groups if g.group.mixed]
    selected = [g for g in groups if g.verdict.selected is not None]
    corrs = [
        g.verdict.correlations[g.verdict.selected]
        for g in selected
        if g.verdict.correlations and g.verdict.correlations[g.verdict.selected] is not None
    ]
    shaped = [i for g in selected for i in g.group.indices]
    values = masked_deltas(deltas, trajs, shaped)
    proposed = sum(len(c.bundles) + c.malformed for c in active)
    alignment = {}
    if shaped and knows_expert_actions(trajs[shaped[0]]):
        # Where delta goes, not how big it is, tells a right rubric from extra text.
        found = credit_alignment([trajs[i] for i in shaped], [deltas[i] for i in shaped])
        alignment = {
            f"orsd/credit_{name}": float(found[key])
            for name, key in (
                ("alignment", "alignment"),
                ("agree_mean", "agree_mean"),
                ("other_mean", "other_mean"),
            )
            if found[key] is not None
        }
    return alignment | {
        "orsd/rubric_frac": len(selected) / len(groups),
        "orsd/mixed_group_frac": len(active) / len(groups),
        "orsd/mean_corr": float(np.mean(corrs)) if corrs else 0.0,
        "orsd/bundles_parsed": float(sum(len(c.bundles) for c in active)),
        "orsd/malformed_frac": sum(c.malformed for c in active) / proposed if proposed else 0.0,
        "orsd/abs_delta_mean": float(values.abs().mean()) if values.numel() else 0.0,
        "orsd/abs_delta_max": float(values.abs().max()) if values.numel() else 0.0,
        "orsd/delta_mean": float(values.mean()) if values.numel() else 0.0,
        "orsd/delta_clipped_frac": (
            float((values.abs() > config.delta_clip).float().mean()) if values.numel() else 0.0
        ),
    }


def capped_frac(
    batch: PreparedBatch, deltas: list[torch.Tensor], corrections: list[torch.Tensor], cfg: ORSDConfig
) -> float:
    """Share of the corrected tokens whose correction the bound capped. A corrected token has a
    delta and an outcome advantage: where the outcome gives no signal (A = 0) the cap is 0 and
    the correction 0 by construction, which is not the bound binding."""
    capped = total = 0
    for i, correction in enumerate(corrections):
        outcome = batch.outcome_advantages[i]
        touched = (deltas[i] != 0) & (outcome != 0)
        capped += int((touched & (correction.abs() >= cfg.correction_bound * outcome.abs() - 1e-12)).sum())
        total += int(touched.sum())
    return capped / total if total else 0.0
