"""The learning-signal section of a comparison report: what each run had to learn from."""

from __future__ import annotations

from typing import Any

from orsd_gym.algos.base import registered_signal_lines


def signal_lines(summary: dict[str, Any]) -> list[str]:
    """The learning signal each run had: mixed groups, what each algorithm says of its own
    signal (`Algorithm.signal_lines`: ORSD's rubrics and corrections, GiGPO's anchor states),
    and the classic-RL baselines' speed."""
    signal = [
        f"{name}: {run['mixed_group_frac']:.2f}"
        for name, run in summary["runs"].items()
        if run["mixed_group_frac"] is not None
    ]
    lines = [
        "Fraction of training groups with mixed outcomes (non-zero GRPO advantage), per run: "
        + (", ".join(signal) or "n/a")
        + "."
    ]
    lines += registered_signal_lines(summary)
    speeds = [
        f"{name}: {run['baseline_env_steps_per_second']:.0f}"
        for name, run in summary["runs"].items()
        if run.get("baseline_env_steps_per_second")  # `random` trains no steps: it has no speed
    ]
    if speeds:
        untrained = " (`random` does not train: it is evaluated as it is)" if "random" in summary["algos"] else ""
        lines.append(
            "Classic-RL baselines train on the same training tasks for as many environment steps as the LLM arms "
            "of their seed used, and are evaluated greedily on the same held-out tasks; their training speed "
            f"(env steps/s){untrained}: " + ", ".join(speeds) + "."
        )
    return lines
