"""What a comparison could have seen: the minimum detectable difference and the headroom.

Beside every difference a report prints (an arm minus the baseline, paired by seed; an arm's
final minus its own start, paired by run) it states the smallest difference the design detects
with 80% power in a two-sided paired t test at alpha 0.05, from the observed spread of the
paired differences and the number of seeds, and how far the start lies below the metric's
ceiling. A difference not told apart from seed noise is then read against what the study could
have seen, never as "no effect".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orsd_gym.train.stats import number_or_nan, t_quantile

#: Two-sided significance level and power the minimum detectable difference is stated at.
ALPHA = 0.05
POWER = 0.80

#: How a report explains the MDD and headroom beside its differences, once.
MDD_LEGEND = (
    f"MDD: the smallest difference a two-sided paired t test over these seeds detects with {POWER:.0%} power "
    f"at alpha {ALPHA:g}, (t(1 - alpha/2, n-1) + t(power, n-1)) x sd / sqrt(n), from the sd of the paired "
    "differences (where they do not vary, from the seed-to-seed sd of the final value named). Headroom: the "
    "metric's ceiling (1) minus the mean start, the largest gain that fits; an MDD above it means the design "
    "could not have detected any gain that fits."
)

#: Where the spread of the paired differences came from (`power_entry`'s ``sd_from``).
PAIRED = "the paired differences"


def minimum_detectable_difference(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference a two-sided paired t test over ``n`` pairs detects with
    probability ``power`` at level ``alpha``, for paired differences of standard deviation ``sd``:

        MDD = (t_{1 - alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n)

    with exact Student t quantiles (the normal approximation understates it badly at a few
    seeds). nan with fewer than 2 pairs or no spread: there is nothing to scale it by."""
    if n < 2 or not sd > 0:
        return math.nan
    df = n - 1
    return (t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)) * sd / math.sqrt(n)


def power_entry(diffs: list[float | None], fallback_sd: float, fallback_from: str, headroom: float) -> dict[str, Any]:
    """results.json's power of one paired difference: the MDD from the spread of ``diffs``;
    where they do not vary (every seed gave the same difference), from ``fallback_sd`` (a
    seed-to-seed sd, named by ``fallback_from``) instead; nan where neither varies or fewer than
    2 seeds measured. ``headroom``: how far the start lies below the metric's ceiling."""
    values = [v for v in map(number_or_nan, diffs) if not math.isnan(v)]  # null: not measured
    n = len(values)
    sd, sd_from = math.nan, None
    if n > 1 and len(set(values)) > 1:
        sd, sd_from = float(np.std(values, ddof=1)), PAIRED
    elif n > 1 and fallback_sd > 0:
        sd, sd_from = fallback_sd, fallback_from
    return {
        "mdd": minimum_detectable_difference(sd, n),
        "sd": sd,
        "sd_from": sd_from,
        "n": n,
        "alpha": ALPHA,
        "power": POWER,
        "headroom": headroom,
    }


def add_power(summary: dict[str, Any], ranges: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Add the power of every difference to a summary (`orsd_gym.experiments.report.summarise`,
    or one read back from results.json), from what it holds: each paired entry's
    ``final_<metric>_power`` and each arm's ``gain_<metric>_power``. ``ranges``: each metric's
    range, whose top is the ceiling. Returns ``summary``."""
    baseline = summary["algos"][0]
    for label, (_, ceiling) in ranges.items():
        base_row = summary["table"][baseline]
        for entry in summary["paired"].values():
            entry[f"final_{label}_power"] = power_entry(
                entry[f"final_{label}_diffs"],
                number_or_nan(base_row.get(f"final_{label}_seed_sd")),
                f"{baseline}'s final {label} across seeds",
                _headroom(base_row, label, ceiling),
            )
        for algo, row in summary["table"].items():
            row[f"gain_{label}_power"] = power_entry(
                row[f"gain_{label}_diffs"],
                number_or_nan(row.get(f"final_{label}_seed_sd")),
                f"{algo}'s final {label} across seeds",
                _headroom(row, label, ceiling),
            )
    return summary


def _headroom(row: dict[str, Any], label: str, ceiling: float) -> float:
    """The metric's ceiling minus the arm's mean start: the largest gain that fits (nan: no ceiling)."""
    return ceiling - number_or_nan(row[f"start_{label}"]["mean"]) if math.isfinite(ceiling) else math.nan


def power_tag(power: dict[str, Any]) -> str:
    """The short form beside a difference, e.g. ``MDD 0.269 exceeds the headroom 0.097``
    (`detectable_sentence` spells it out)."""
    mdd, headroom = number_or_nan(power["mdd"]), number_or_nan(power["headroom"])
    if math.isnan(mdd) and power["n"] < 2:
        text = f"MDD not computable with {_seeds(power['n'])}"
    elif math.isnan(mdd):
        text = f"MDD not computable: nothing varies across the {power['n']} seeds"
    elif power["sd_from"] == PAIRED:
        text = f"MDD {mdd:.3f}"
    else:
        text = f"MDD {mdd:.3f} (sd of {power['sd_from']})"
    if math.isnan(headroom):
        return text
    if mdd > headroom:
        return f"{text} exceeds the headroom {headroom:.3f}"
    return f"{text}, headroom {headroom:.3f}"


def detectable_sentence(power: dict[str, Any], start_of: str) -> str:
    """The effect statement's reading of ``power``: what size of difference the design could
    have seen, and whether any gain that fits between ``start_of``'s start and the ceiling."""
    mdd, headroom, n = number_or_nan(power["mdd"]), number_or_nan(power["headroom"]), power["n"]
    test = f"{POWER:.0%} power, two-sided alpha {ALPHA:g}"
    if math.isnan(mdd):
        text = f"the smallest difference this design could detect is not computable with {_seeds(n)}" + (
            ": neither the paired differences nor the baseline's final value vary across seeds" if n > 1 else ""
        )
    elif power["sd_from"] == PAIRED:
        text = f"this design detects a difference of {mdd:.3f} or more ({test}; paired sd {power['sd']:.3f}, {n} seeds)"
    else:
        text = (
            f"the paired differences do not vary, so from the sd of {power['sd_from']} ({power['sd']:.3f}) "
            f"this design detects a difference of {mdd:.3f} or more ({test}, {n} seeds)"
        )
    if math.isnan(headroom):
        return text
    text += f"; {start_of}'s start lies {headroom:.3f} below the ceiling"
    if mdd > headroom:
        text += ", less than the MDD: the design could not have detected any gain that fits"
    return text


def _seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"
