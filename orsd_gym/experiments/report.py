"""The comparison report: statistics across seeds, learning curves, markdown.

Per algorithm: final and best held-out success rate and score (mean over the eval tasks),
mean +- 95% confidence interval across seeds (Student t), paired differences against the
first algorithm (same seed = same initial weights, tasks and evaluation set, so pairing
removes the seed-to-seed variation both runs share), and each algorithm's gain over its own
start (final minus first evaluation of the same run, on the same tasks).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from orsd_gym import jsonio
from orsd_gym.experiments.plots import METRIC_RANGES, coinciding_arms, plot_curves
from orsd_gym.train.stats import Estimate, mean_ci, number_or_nan

#: Below this many seeds an interval is reported but called too wide to separate arms.
FEW_SEEDS = 3

METRICS = (("success", "eval/success_rate"), ("score", "eval/mean_return"))
#: The range a metric (and a difference of two) can take: intervals are clipped to it.
RANGES = {label: METRIC_RANGES[key] for label, key in METRICS}


#: The results table's columns: the algorithm, then `_row_cells`.
HEADERS = ("algorithm", "start success", "final success", "best success", "start score", "final score", "best score")


def _difference_bounds(label: str) -> tuple[float, float]:
    low, high = RANGES[label]
    return (low - high, high - low)


def summarise(results: list[Any]) -> dict[str, Any]:
    """results.json content from a list of `RunResult`."""
    algos = list(dict.fromkeys(r.algo for r in results))
    per_run = {}
    table: dict[str, dict[str, Any]] = {}
    for algo in algos:
        runs = [r for r in results if r.algo == algo and r.evals]
        entry: dict[str, Any] = {}
        for label, key in METRICS:
            starts = [r.evals[0].get(key, math.nan) for r in runs]
            finals = [r.evals[-1].get(key, math.nan) for r in runs]
            bests = [max(e.get(key, -math.inf) for e in r.evals) for r in runs]
            entry[f"start_{label}"] = mean_ci(starts, RANGES[label]).as_dict()
            entry[f"final_{label}"] = mean_ci(finals, RANGES[label]).as_dict()
            entry[f"best_{label}"] = mean_ci(bests, RANGES[label]).as_dict()
            entry[f"start_{label}_seed_sd"] = float(np.std(starts, ddof=1)) if len(starts) > 1 else math.nan
            entry[f"final_{label}_seed_sd"] = float(np.std(finals, ddof=1)) if len(finals) > 1 else math.nan
            # Only runs evaluated again after training have a gain (`random` is evaluated once).
            gains = [r.evals[-1].get(key, math.nan) - r.evals[0].get(key, math.nan) for r in runs if len(r.evals) > 1]
            entry[f"gain_{label}"] = mean_ci(gains, _difference_bounds(label)).as_dict()
            entry[f"gain_{label}_diffs"] = gains
        table[algo] = entry
        for r in runs:
            per_run[f"{algo}-seed{r.seed}"] = {
                "algo": algo,
                "seed": r.seed,
                "run_dir": str(r.run_dir),
                "curve": [
                    {"iteration": e["iteration"], "env_steps": e["env_steps"], **{k: e.get(k) for _, k in METRICS}}
                    for e in r.evals
                ],
                "orsd_rubric_frac": _mean_metric(r.metrics, "orsd/rubric_frac"),
                "orsd_abs_delta_mean": _mean_metric(r.metrics, "orsd/abs_delta_mean"),
                "credit_alignment": _mean_metric(r.metrics, "orsd/credit_alignment"),
                "grad_norm": _mean_metric(r.metrics, "loss/grad_norm"),
                # A classic-RL baseline's run has no training iterations (see `orsd_gym.experiments.baseline_runs`).
                "baseline_env_steps_per_second": _mean_metric(r.metrics, "baseline/env_steps_per_second"),
                "zero_adv_group_frac": _mean_metric(r.metrics, "algo/zero_adv_group_frac"),
                "mixed_group_frac": _mixed_group_frac(r.metrics),
                "train_success_rate": _mean_metric(r.metrics, "train/success_rate"),
                **_chain_measures(r),
            }
    paired = {}
    baseline = algos[0]
    for algo in algos[1:]:
        entry = {}
        for label, key in METRICS:
            diffs = []
            for r in results:
                if r.algo != algo or not r.evals:
                    continue
                partner = next((b for b in results if b.algo == baseline and b.seed == r.seed and b.evals), None)
                if partner is not None:
                    diffs.append(r.evals[-1].get(key, math.nan) - partner.evals[-1].get(key, math.nan))
            entry[f"final_{label}_diff"] = mean_ci(diffs, _difference_bounds(label)).as_dict()
            entry[f"final_{label}_diffs"] = diffs
        paired[f"{algo} - {baseline}"] = entry
    return {"algos": algos, "table": table, "paired": paired, "runs": per_run, "tasks": task_summary(results)}


def task_summary(results: list[Any]) -> dict[str, Any]:
    """What the runs' task plans say about held-out evaluation, over every run together: the
    evaluation tasks, and how many of them any run trained on (0 unless evaluation on training
    tasks was asked for)."""
    plans = [r.plan for r in results]
    if not plans:
        return {}
    eval_keys = {key for plan in plans for key in plan["keys"]["eval"]}
    trained = {key for plan in plans for kind in ("train", "warm_start") for key in plan["keys"][kind]}
    first = plans[0]["summary"]
    return {
        "partition": first["partition"],
        "eval_on": first["eval_on"],
        "eval_kwargs": first["eval_kwargs"],
        "eval_tasks": first["eval_tasks"],
        "eval_distinct": len(eval_keys),
        "train_distinct": len(trained),
        "eval_train_overlap": len(eval_keys & trained),
        "warnings": sorted({w for plan in plans for w in plan["summary"]["warnings"]}),
    }


#: Per-run measures of ORSD's three links (`chain_lines`): key in results.json -> (where, metric).
CHAIN = {
    "teacher_gain": ("evals", "teacher/gain"),
    "teacher_gain_vs_other": ("evals", "teacher/gain_vs_other"),
    "train_teacher_gain": ("metrics", "teacher/train_gain"),
    "correction_ratio": ("metrics", "grad_share/correction_ratio"),
    "correction_cosine": ("metrics", "grad_share/cosine"),
    "correction_capped_frac": ("metrics", "orsd/correction_capped_frac"),
}


def _chain_measures(result: Any) -> dict[str, float | None]:
    """The run's mean of each `CHAIN` measure over its evaluations or iterations (None: not measured)."""
    return {name: _mean_metric(getattr(result, where), key) for name, (where, key) in CHAIN.items()}


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


def _mean_metric(metrics: list[dict], key: str) -> float | None:
    values = [m[key] for m in metrics if m.get(key) is not None]
    return float(np.mean(values)) if values else None


def _mixed_group_frac(metrics: list[dict]) -> float | None:
    zero = _mean_metric(metrics, "algo/zero_adv_group_frac")
    return None if zero is None else 1.0 - zero


def effect_statement(summary: dict[str, Any]) -> list[str]:
    """Plain-language reading of each paired difference against seed noise."""
    lines = []
    baseline = summary["algos"][0]
    for name, entry in summary["paired"].items():
        diff = entry["final_success_diff"]
        n = diff["n"]
        if n == 0:
            continue
        row = summary["table"][baseline]
        # Read back from results.json, a number that does not exist is null.
        noise = [number_or_nan(row.get(f"{when}_success_seed_sd")) for when in ("start", "final")]
        noise_text = (
            f"; seed-to-seed sd of {baseline}'s success: {noise[0]:.3f} at the start, {noise[1]:.3f} at the end"
            if not any(math.isnan(x) for x in noise)
            else ""
        )
        if n < 2 or math.isnan(number_or_nan(diff["ci95"])):
            lines.append(
                f"- {name}: final success differs by {diff['mean']:+.3f} on a single seed; "
                "one seed cannot separate an effect from seed noise."
            )
            continue
        if all(d == 0 for d in entry["final_success_diffs"]):
            lines.append(
                f"- {name}: identical final success on every one of {n} seeds (difference 0){noise_text}: "
                "no measurable effect at this budget."
            )
            continue
        diffs = entry["final_success_diffs"]
        if n >= FEW_SEEDS and len(set(diffs)) == 1:
            # Every seed equal: the interval has no width, which says nothing about task noise.
            tasks = summary.get("tasks", {}).get("eval_tasks")
            share = f", {abs(diffs[0]) * tasks:.0f} of {tasks} held-out tasks," if tasks else ""
            lines.append(
                f"- {name}: the same final-success difference {diffs[0]:+.3f}{share} on every one of {n} seeds; "
                "an interval across seeds has no width here and cannot tell it from the noise of so few tasks."
            )
            continue
        estimate = Estimate.from_dict(diff, _difference_bounds("success"))
        low, high = estimate.low, estimate.high
        if n < FEW_SEEDS:
            # Two seeds that happen to agree give a zero-width interval: it proves nothing.
            same_sign = all(d > 0 for d in entry["final_success_diffs"]) or all(
                d < 0 for d in entry["final_success_diffs"]
            )
            verdict = (
                f"every seed goes the same way, but {n} seeds are too few for an interval to separate the arms"
                if same_sign
                else f"the seeds disagree, and {n} seeds are too few for an interval to separate the arms"
            )
        elif low > 0 or high < 0:
            verdict = "the 95% interval excludes zero: the difference is larger than seed noise"
        else:
            verdict = "the 95% interval includes zero: the difference is not distinguishable from seed noise"
        lines.append(
            f"- {name}: paired final-success difference {diff['mean']:+.3f} "
            f"(95% CI [{low:+.3f}, {high:+.3f}], {n} seeds){noise_text}; {verdict}."
        )
    return lines


def gain_lines(summary: dict[str, Any]) -> list[str]:
    """Did each algorithm learn? Its final held-out numbers minus its own start, paired by run."""
    lines = []
    for algo in summary["algos"]:
        row = summary["table"][algo]
        gain = row.get("gain_score")
        if not gain or gain["n"] == 0:
            continue
        success = Estimate.from_dict(row["gain_success"], _difference_bounds("success"))
        score = Estimate.from_dict(gain, _difference_bounds("score"))
        per_seed = ", ".join(f"{d:+.3f}" for d in row["gain_score_diffs"])
        if score.n < FEW_SEEDS:
            verdict = f"{score.n} seed(s) are too few for an interval"
        elif score.low > 0:
            verdict = "the 95% interval is above zero: it learned"
        elif score.high < 0:
            verdict = "the 95% interval is below zero: it got worse"
        else:
            verdict = "the 95% interval includes zero: no gain distinguishable from seed noise"
        lines.append(f"- {algo}: score {score}, success {success}; score gain per seed {per_seed}; {verdict}.")
    return lines


def write_report(out_dir: str | Path, base_config: Any, results: list[Any]) -> Path:
    """Write results.json, learning curves and report.md into ``out_dir``; return report.md."""
    from orsd_gym import configio

    out_dir = Path(out_dir)
    summary = summarise(results)
    (out_dir / "results.json").write_text(jsonio.dumps(summary, indent=1))
    plot_curves(summary, out_dir / "success_curve.png", "eval/success_rate", "held-out success rate")
    plot_curves(summary, out_dir / "score_curve.png", "eval/mean_return", "held-out score (mean return)")
    cfg = configio.to_dict(base_config)
    seeds = sorted({r.seed for r in results})
    rollout = cfg["rollout"]
    budget = cfg["train"]["iterations"] * rollout["tasks_per_iteration"] * rollout["group_size"]
    lora = "on" if cfg["model"]["lora"]["enabled"] else "off"
    lines = [
        f"# {' vs '.join(summary['algos'])} on {cfg['env']['id']}",
        "",
        "## Setup",
        f"- model: `{cfg['model']['name']}` ({cfg['model']['dtype']}, LoRA {lora})",
        f"- env: `{cfg['env']['id']}` kwargs `{json.dumps(cfg['env']['kwargs'])}`",
        f"- seeds: {seeds}; per run {cfg['train']['iterations']} iterations x {rollout['tasks_per_iteration']} tasks "
        f"x group {rollout['group_size']} = {budget} training episodes (max {rollout['max_turns']} turns each)",
        *_task_lines(summary, cfg),
        *_warm_start_lines(cfg),
        "",
        "## Held-out results (mean [95% CI] across seeds, clipped to the metric's range)",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    for algo in summary["algos"]:
        lines.append(f"| {algo} | " + " | ".join(_row_cells(summary["table"][algo])) + " |")
    if len(seeds) < FEW_SEEDS:
        lines += ["", f"With {len(seeds)} seed(s) these intervals are too wide to tell arms apart."]
    lines += ["", "## Paired differences (same seed: same initial weights, tasks and eval set)", ""]
    for name, entry in summary["paired"].items():
        d = Estimate.from_dict(entry["final_success_diff"], _difference_bounds("success"))
        s = Estimate.from_dict(entry["final_score_diff"], _difference_bounds("score"))
        lines.append(f"- {name}: final success {d}, final score {s}; per seed {entry['final_success_diffs']}")
    lines += ["", "## How big is the effect?", ""] + (effect_statement(summary) or ["- only one algorithm was run."])
    gains = gain_lines(summary)
    if gains:
        lines += ["", "## Gain over the start (final minus start of the same run, same eval tasks)", "", *gains]
    signal = [
        f"{name}: {run['mixed_group_frac']:.2f}"
        for name, run in summary["runs"].items()
        if run["mixed_group_frac"] is not None
    ]
    lines += [
        "",
        "## Learning signal",
        "",
        "Fraction of training groups with mixed outcomes (non-zero GRPO advantage), per run: "
        + (", ".join(signal) or "n/a")
        + ".",
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
    lines += chain_lines(summary)
    coinciding = coinciding_arms(summary)
    lines += ["", "## Learning curves", ""]
    if coinciding:
        pairs = "; ".join(f"{a} and {b}" for a, b in coinciding)
        lines += [
            "Identical mean success curves (drawn a few points apart on the page to stay visible; "
            f"their values are equal): {pairs}.",
            "",
        ]
    lines += ["![success](success_curve.png)", "", "![score](score_curve.png)", ""]
    report = out_dir / "report.md"
    report.write_text("\n".join(lines), encoding="utf-8")
    return report


def _row_cells(row: dict[str, Any]) -> list[str]:
    """One arm's cells of the results table."""
    columns = ("start_success", "final_success", "best_success", "start_score", "final_score", "best_score")
    return [str(Estimate.from_dict(row[m], RANGES[m.split("_", 1)[1]])) for m in columns]


def _task_lines(summary: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    """The report's statement of what was evaluated, when, and whether it was held out."""
    tasks = summary["tasks"]
    if not tasks:
        return []
    held_out = "held-out" if tasks["eval_on"] == "held_out" else "training (not held out)"
    evaluated = sorted(
        {
            point["iteration"]
            for run in summary["runs"].values()
            if run.get("baseline_env_steps_per_second") is None
            for point in run["curve"]
        }
    )
    lines = [
        f"- evaluation: {tasks['eval_tasks']} {held_out} tasks ({tasks['eval_distinct']} distinct), env kwargs "
        f"`{json.dumps(tasks['eval_kwargs'])}`, temperature {cfg['eval']['temperature']}, after iterations "
        f"{', '.join(map(str, evaluated)) or 'none'}",
        f"- train/eval partition: {tasks['partition']}; evaluation tasks that any run trained on: "
        f"{tasks['eval_train_overlap']} (of {tasks['train_distinct']} distinct training tasks)",
    ]
    return lines + [f"- **warning**: {warning}" for warning in tasks["warnings"]]


def _warm_start_lines(cfg: dict[str, Any]) -> list[str]:
    ws = cfg["warm_start"]
    if ws["episodes"] <= 0:
        return ["- warm start: none (training starts from the model's own weights)"]
    return [
        f"- warm start: behaviour cloning of the env's expert on {ws['episodes']} training tasks, "
        f"{ws['epochs']} epochs at lr {ws['lr']}, once per seed and shared by every algorithm of that seed "
        "(the start of every curve)"
    ]


def print_summary(report: Path, console: Any) -> None:
    """Print the results table of a written report to a rich console."""
    from rich.table import Table

    summary = json.loads((report.parent / "results.json").read_text())
    table = Table(title=f"held-out results ({report})")
    for column in HEADERS:
        table.add_column(column, justify="right" if column != "algorithm" else "left")
    for algo in summary["algos"]:
        row = summary["table"][algo]
        table.add_row(algo, *_row_cells(row))
    console.print(table)
    for line in effect_statement(summary):
        console.print(line)
