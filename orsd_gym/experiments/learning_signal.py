"""The learning-signal section of a comparison report: what each run had to learn from."""

from __future__ import annotations

from typing import Any


def signal_lines(summary: dict[str, Any]) -> list[str]:
    """The learning signal each run had: mixed groups, ORSD's rubrics and corrections, GiGPO's
    anchor states, credit alignment, gradient norms, the classic-RL baselines' speed, and what
    the controls are."""
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
    orsd = [
        f"{name}: {run['orsd_rubric_frac']:.2f} (mean |delta| {run['orsd_abs_delta_mean'] or 0.0:.4f})"
        for name, run in summary["runs"].items()
        if run["orsd_rubric_frac"] is not None
    ]
    if orsd:
        lines.append(
            "Fraction of groups where ORSD selected a rubric, and the mean |log-likelihood gap| of the "
            "corrected tokens: " + ", ".join(orsd) + ". Where this is small, ORSD's advantages are GRPO's "
            "and the two runs of a seed coincide."
        )
    lines += _anchor_lines(summary)
    aligned = [
        f"{name}: {run['credit_alignment']:+.4f}"
        for name, run in summary["runs"].items()
        if run.get("credit_alignment") is not None
    ]
    if aligned:
        lines.append(
            "Credit alignment (mean delta on tokens of actions that agree with the expert's next action minus "
            "on other actions; what tells a right rubric from extra text): " + ", ".join(aligned) + "."
        )
    norms = [f"{name}: {run['grad_norm']:.2f}" for name, run in summary["runs"].items() if run.get("grad_norm")]
    if norms and orsd:
        lines.append(
            "Gradient norm of the updates before clipping (mean over iterations; each step is clipped to "
            "optim.grad_clip): " + ", ".join(norms) + ". Where an ORSD run's is several times its seed's "
            "GRPO run's, the correction, not the outcome, sets the direction of the clipped step."
        )
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
    if any(":expert" in algo for algo in summary["algos"]):
        lines.append(
            "`orsd:expert` is a positive control: its rubrics restate the env's expert plan, privileged "
            "information no real run has. `orsd:shuffled` applies rubrics written for other tasks."
        )
    return lines


def _anchor_lines(summary: dict[str, Any]) -> list[str]:
    """GiGPO's step level: how many turns shared a state with another turn of their task's group
    (the only turns it can give a step advantage), and the step advantage beside the episode's."""
    anchored = [
        f"{name}: {run['gigpo_anchored_turn_frac']:.2f} (mean anchor group {run['gigpo_anchor_group_size']:.2f} turns; "
        f"mean |step advantage| {run['gigpo_step_adv_abs_mean']:.3f} beside |episode advantage| "
        f"{run['gigpo_episode_adv_abs_mean']:.3f})"
        for name, run in summary["runs"].items()
        if run.get("gigpo_anchored_turn_frac") is not None
    ]
    if not anchored:
        return []
    return [
        "Share of GiGPO's training turns in an anchor group of more than one turn (a state another turn of the "
        "task's group also acted in), per run, with the advantages per turn: " + ", ".join(anchored) + ". "
        "Where the share is small, GiGPO's advantages are GRPO's."
    ]
