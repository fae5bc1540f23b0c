"""ORSD's chain in a comparison report: does the teacher beat the student, does the correction
point at the expert's decisions, does it leave the outcome in charge? Per run the measures, per
arm which link holds, fails or is not resolved."""

from __future__ import annotations

from typing import Any

from orsd_gym.train.stats import Estimate, mean_ci

#: Per-run measures of ORSD's three links (`chain_lines`): key in results.json -> (where, metric).
CHAIN = {
    "teacher_gain": ("evals", "teacher/gain"),
    "teacher_gain_vs_other": ("evals", "teacher/gain_vs_other"),
    "train_teacher_gain": ("metrics", "teacher/train_gain"),
    "correction_ratio": ("metrics", "grad_share/correction_ratio"),
    "correction_cosine": ("metrics", "grad_share/cosine"),
    "correction_capped_frac": ("metrics", "orsd/correction_capped_frac"),
}


#: ORSD's three links (`chain_lines`): a short name, what must hold, the per-run measure, its
#: threshold and side, and whether it concerns only runs with a correction (the teacher test
#: concerns any policy).
LINKS = (
    (
        "teacher",
        "the teacher (the policy with the expert's rubric in context) beats the student",
        "teacher_gain",
        0.0,
        ">",
        False,
    ),
    (
        "alignment",
        "the correction points at the expert's decisions (credit alignment)",
        "credit_alignment",
        0.0,
        ">",
        True,
    ),
    ("share", "the correction's gradient stays below the outcome's", "correction_ratio", 1.0, "<", True),
)


def chain_lines(summary: dict[str, Any]) -> list[str]:
    """Report lines on ORSD's chain: per run the teacher gain (does the policy play better with
    the rubric in context?), credit alignment (does the correction point at the decisions?) and
    the correction's gradient share (does it leave the outcome in charge?); then, per arm, which
    links hold, fail or are not resolved (`link_verdict`)."""
    runs = summary["runs"]
    measured = [n for n, r in runs.items() if any(r.get(k) is not None for k in (*CHAIN, "credit_alignment"))]
    if not measured:
        return []

    def cell(value: float | None, fmt: str = "+.3f") -> str:
        return "n/a" if value is None else format(value, fmt)

    lines = [
        "",
        "## Does the method's chain hold? (per run, means over evaluations or iterations)",
        "",
        "| run | teacher gain | vs other rubric | teacher gain (training) | credit alignment "
        "| correction / outcome gradient | cosine | capped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in measured:
        r = runs[name]
        lines.append(
            f"| {name} | {cell(r['teacher_gain'])} | {cell(r['teacher_gain_vs_other'])} | "
            f"{cell(r['train_teacher_gain'])} | {cell(r['credit_alignment'], '+.4f')} | "
            f"{cell(r['correction_ratio'], '.2f')} | {cell(r['correction_cosine'], '+.2f')} | "
            f"{cell(r['correction_capped_frac'], '.2f')} |"
        )
    lines += [
        "",
        "Per arm, across its seeds (one run per seed, so the runs are independent): a link holds when "
        "the 95% interval lies on its side of the threshold, fails when it lies on the other side, and "
        "is not resolved when it contains the threshold. Links: *teacher* (the policy plays better with "
        "the expert's rubric in context than without), *alignment* (the correction points at the expert's "
        "decisions), *share* (the correction's gradient stays below the outcome's).",
        "",
    ]
    arms = list(dict.fromkeys(runs[n]["algo"] for n in measured))
    for arm in arms:
        arm_runs = [runs[n] for n in measured if runs[n]["algo"] == arm]
        corrected = any(r.get("orsd_rubric_frac") is not None for r in arm_runs)
        verdicts = {"holds": [], "fails": [], "not resolved": [], "not measured": []}
        details = []
        for short, text, key, threshold, side, needs_correction in LINKS:
            if needs_correction and not corrected:
                continue  # e.g. GRPO: no correction to align or to weigh
            estimate = mean_ci([r[key] for r in arm_runs if r.get(key) is not None])
            verdict = link_verdict(estimate, threshold, side)
            verdicts["not resolved" if verdict.startswith("one seed") else verdict].append(short)
            if estimate.n == 1:
                details.append(f"{text}: {verdict} ({estimate.mean:+.3f}; needs {side} {threshold:g})")
            elif estimate.n:
                details.append(f"{text}: {verdict} ({estimate} over {estimate.n} seeds; needs {side} {threshold:g})")
        named = "; ".join(f"{v}: {', '.join(t)}" for v, t in verdicts.items() if t)
        lines.append(f"- **{arm}**: {named}.")
        lines += [f"    - {d}." for d in details]
    return lines


def link_verdict(estimate: Estimate, threshold: float, side: str) -> str:
    """``holds`` / ``fails`` when the estimate's 95% interval lies wholly on the needed / the
    other side of ``threshold``, ``not resolved`` when it contains it."""
    if estimate.n == 0:
        return "not measured"
    if estimate.n < 2:
        return "one seed: no interval"
    above, below = estimate.low > threshold, estimate.high < threshold
    if (above and side == ">") or (below and side == "<"):
        return "holds"
    if above or below:
        return "fails"
    return "not resolved"
