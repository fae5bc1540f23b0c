"""What a comparison report says about ORSD's learning signal (`ORSD.signal_lines`): how often a
rubric was selected and how large its correction was, the credit alignment, the gradient norms
beside GRPO's, and what the controls are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: A run summary's key -> the ORSD metric whose mean over iterations it holds.
RUN_SUMMARIES = {
    "orsd_rubric_frac": "orsd/rubric_frac",
    "orsd_abs_delta_mean": "orsd/abs_delta_mean",
    "credit_alignment": "orsd/credit_alignment",
}


def orsd_signal_lines(summary: Mapping[str, Any]) -> list[str]:
    runs = summary["runs"]
    corrected = [
        f"{name}: {run['orsd_rubric_frac']:.2f} (mean |delta| {run['orsd_abs_delta_mean'] or 0.0:.4f})"
        for name, run in runs.items()
        if run.get("orsd_rubric_frac") is not None
    ]
    lines = []
    if corrected:
        lines.append(
            "Fraction of groups where ORSD selected a rubric, and the mean |log-likelihood gap| of the "
            "corrected tokens: " + ", ".join(corrected) + ". Where this is small, ORSD's advantages are GRPO's "
            "and the two runs of a seed coincide."
        )
    aligned = [
        f"{name}: {run['credit_alignment']:+.4f}"
        for name, run in runs.items()
        if run.get("credit_alignment") is not None
    ]
    if aligned:
        lines.append(
            "Credit alignment (mean delta on tokens of actions that agree with the expert's next action minus "
            "on other actions; what tells a right rubric from extra text): " + ", ".join(aligned) + "."
        )
    norms = [f"{name}: {run['grad_norm']:.2f}" for name, run in runs.items() if run.get("grad_norm")]
    if norms and corrected:
        lines.append(
            "Gradient norm of the updates before clipping (mean over iterations; each step is clipped to "
            "optim.grad_clip): " + ", ".join(norms) + ". Where an ORSD run's is several times its seed's "
            "GRPO run's, the correction, not the outcome, sets the direction of the clipped step."
        )
    if any(":expert" in algo for algo in summary["algos"]):
        lines.append(
            "`orsd:expert` is a positive control: its rubrics restate the env's expert plan, privileged "
            "information no real run has. `orsd:shuffled` applies rubrics written for other tasks."
        )
    return lines
