"""Learning curves of a comparison: each arm's mean over seeds, its seed band, and which arms coincide."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from orsd_gym.writable import write_with

#: The range each plotted metric can take (the y-axis spans it; intervals are clipped to it).
#: The built-in envs' returns lie in [0, 1] (success, WebShop's score).
METRIC_RANGES = {"eval/success_rate": (0.0, 1.0), "eval/mean_return": (0.0, 1.0)}

#: How arms are told apart in plots even where their curves coincide.
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P")


def plot_curves(summary: dict[str, Any], path: Path, key: str, ylabel: str) -> dict[str, Any]:
    """Per arm: its seeds' mean curve (own colour, line style and marker) and a band from the
    lowest to the highest seed, on a y-axis spanning the metric's range. Curves that coincide
    are drawn a few points apart on the page (an offset of the drawing, not of the data, so
    every curve keeps its values); the report names them. Returns what was drawn: each arm's
    y values and the axes' limits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.transforms import offset_copy

    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=120)
    algos = summary["algos"]
    drawn: dict[str, Any] = {"lines": {}}
    steps: list[float] = []
    for index, algo in enumerate(algos):
        curves = [run["curve"] for run in summary["runs"].values() if run["algo"] == algo]
        if not curves:
            continue
        length = min(len(c) for c in curves)
        xs = np.mean([[p["env_steps"] for p in c[:length]] for c in curves], axis=0)
        ys = np.array([[p[key] if p[key] is not None else np.nan for p in c[:length]] for c in curves], dtype=float)
        shift = offset_copy(ax.transData, fig=fig, y=(index - (len(algos) - 1) / 2) * 2.5, units="points")
        colour, style, marker = f"C{index}", _STYLES[index % len(_STYLES)], _MARKERS[index % len(_MARKERS)]
        if len(curves) > 1:
            ax.fill_between(xs, ys.min(axis=0), ys.max(axis=0), color=colour, alpha=0.12, linewidth=0)
        label = f"{algo} (mean of {len(curves)} seed{'s' if len(curves) > 1 else ''})"
        (line,) = ax.plot(
            xs, ys.mean(axis=0), color=colour, linestyle=style, marker=marker, linewidth=2, label=label, transform=shift
        )
        line.set_clip_on(False)  # a curve on the range's edge (success 0 or 1) stays whole
        line.set_in_layout(False)
        drawn["lines"][algo] = np.asarray(line.get_ydata(), dtype=float)
        steps.extend(xs)
    low, high = METRIC_RANGES[key]
    ax.set_ylim(low, high)
    if steps:
        # Set from the data: the curves are drawn through an offset transform, which matplotlib's
        # autoscale ignores, so without a seed band (one seed) the axis would span +-0.05 around 0.
        first, last = min(steps), max(steps)
        margin = 0.03 * (last - first) or 1.0
        ax.set_xlim(first - margin, last + margin)
    drawn["xlim"], drawn["ylim"] = ax.get_xlim(), ax.get_ylim()
    ax.set_xlabel("environment steps")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # runs without evaluations draw nothing to label
        ax.legend(title="band: lowest to highest seed", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    try:
        write_with(path, "a plot", fig.savefig)
    finally:
        plt.close(fig)
    return drawn


def coinciding_arms(summary: dict[str, Any], key: str = "eval/success_rate") -> list[tuple[str, str]]:
    """Pairs of arms whose mean curves are identical at every evaluation (drawn on top of each other)."""
    means = {}
    for algo in summary["algos"]:
        curves = [run["curve"] for run in summary["runs"].values() if run["algo"] == algo]
        if curves:
            length = min(len(c) for c in curves)
            means[algo] = [round(float(np.mean([c[i][key] for c in curves])), 9) for i in range(length)]
    names = list(means)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1 :] if means[a] == means[b]]
