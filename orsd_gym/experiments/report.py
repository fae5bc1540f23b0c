"""The comparison report: statistics across seeds, learning curves, markdown.

Per algorithm: final and best held-out success rate and score (mean over the eval tasks),
mean +- 95% confidence interval across seeds (Student t), paired differences against the
first algorithm (same seed = same initial weights, tasks and evaluation set, so pairing
removes the seed-to-seed variation both runs share), and each algorithm's gain over its own
start (final minus first evaluation of the same run, on the same tasks); beside every
difference, the smallest one the design could detect and the headroom below the ceiling
(`orsd_gym.experiments.power`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from orsd_gym import jsonio
from orsd_gym.algos.base import declared_run_summaries
from orsd_gym.experiments.learning_signal import signal_lines
from orsd_gym.experiments.plots import METRIC_RANGES, coinciding_arms, plot_curves
from orsd_gym.experiments.power import MDD_LEGEND, add_power, detectable_sentence, power_tag
from orsd_gym.probes.chain import CHAIN, chain_lines
from orsd_gym.train.stats import Estimate, mean_ci, number_or_nan
from orsd_gym.writable import write_file

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
                **{key: _mean_metric(r.metrics, metric) for key, metric in declared_run_summaries().items()},
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
    summary = {"algos": algos, "table": table, "paired": paired, "runs": per_run, "tasks": task_summary(results)}
    return add_power(summary, RANGES)


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


def _chain_measures(result: Any) -> dict[str, float | None]:
    """The run's mean of each `CHAIN` measure over its evaluations or iterations (None: not measured)."""
    return {name: _mean_metric(getattr(result, where), key) for name, (where, key) in CHAIN.items()}


def _mean_metric(metrics: list[dict], key: str) -> float | None:
    values = [m[key] for m in metrics if m.get(key) is not None]
    return float(np.mean(values)) if values else None


def _mixed_group_frac(metrics: list[dict]) -> float | None:
    zero = _mean_metric(metrics, "algo/zero_adv_group_frac")
    return None if zero is None else 1.0 - zero


def effect_statement(summary: dict[str, Any]) -> list[str]:
    """Plain-language reading of each paired final-success difference against seed noise, and
    what size of difference the design could have detected (`detectable_sentence`)."""
    lines = []
    baseline = summary["algos"][0]
    noise_text = _seed_noise_text(summary["table"][baseline], baseline)
    for name, entry in summary["paired"].items():
        if entry["final_success_diff"]["n"] == 0:
            continue
        reading = _difference_reading(entry, summary.get("tasks", {}).get("eval_tasks"), noise_text)
        lines.append(f"- {name}: {reading}; {detectable_sentence(entry['final_success_power'], baseline)}.")
    return lines


def _seed_noise_text(row: dict[str, Any], baseline: str) -> str:
    # Read back from results.json, a number that does not exist is null.
    noise = [number_or_nan(row.get(f"{when}_success_seed_sd")) for when in ("start", "final")]
    if any(math.isnan(x) for x in noise):
        return ""
    return f"; seed-to-seed sd of {baseline}'s success: {noise[0]:.3f} at the start, {noise[1]:.3f} at the end"


def _difference_reading(entry: dict[str, Any], eval_tasks: int | None, noise_text: str) -> str:
    """How a paired final-success difference compares with seed noise (without its power)."""
    diff, diffs = entry["final_success_diff"], entry["final_success_diffs"]
    n = diff["n"]
    if n < 2 or math.isnan(number_or_nan(diff["ci95"])):
        return (
            f"final success differs by {diff['mean']:+.3f} on a single seed; "
            "one seed cannot separate an effect from seed noise"
        )
    if all(d == 0 for d in diffs):
        return f"identical final success on every one of {n} seeds (difference 0){noise_text}"
    if n >= FEW_SEEDS and len(set(diffs)) == 1:
        # Every seed equal: the interval has no width, which says nothing about task noise.
        share = f", {abs(diffs[0]) * eval_tasks:.0f} of {eval_tasks} held-out tasks," if eval_tasks else ""
        return (
            f"the same final-success difference {diffs[0]:+.3f}{share} on every one of {n} seeds; "
            "an interval across seeds has no width here and cannot tell it from the noise of so few tasks"
        )
    estimate = Estimate.from_dict(diff, _difference_bounds("success"))
    low, high = estimate.low, estimate.high
    if n < FEW_SEEDS:
        # Two seeds that happen to agree give a zero-width interval: it proves nothing.
        same_sign = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
        agreement = "every seed goes the same way, but" if same_sign else "the seeds disagree, and"
        verdict = f"{agreement} {n} seeds are too few for an interval to separate the arms"
    elif low > 0 or high < 0:
        verdict = "the 95% interval excludes zero: the difference is larger than seed noise"
    else:
        verdict = "the 95% interval includes zero: the difference is not distinguishable from seed noise"
    return (
        f"paired final-success difference {diff['mean']:+.3f} "
        f"(95% CI [{low:+.3f}, {high:+.3f}], {n} seeds){noise_text}; {verdict}"
    )


def gain_lines(summary: dict[str, Any]) -> list[str]:
    """Did each algorithm learn? Its final held-out numbers minus its own start, paired by run,
    each with what gain the design could have detected."""
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
            verdict = "the 95% interval includes zero: the gain is not distinguishable from seed noise"
        lines.append(
            f"- {algo}: score {score} ({power_tag(row['gain_score_power'])}), "
            f"success {success} ({power_tag(row['gain_success_power'])}); "
            f"score gain per seed {per_seed}; {verdict}."
        )
    return lines


def write_report(out_dir: str | Path, base_config: Any, results: list[Any]) -> Path:
    """Write results.json, learning curves and report.md into ``out_dir``; return report.md."""
    from orsd_gym import configio

    out_dir = Path(out_dir)
    summary = summarise(results)
    plot_curves(summary, out_dir / "success_curve.png", "eval/success_rate", "held-out success rate")
    plot_curves(summary, out_dir / "score_curve.png", "eval/mean_return", "held-out score (mean return)")
    return write_summary_report(out_dir, summary, configio.to_dict(base_config))


def rewrite_report(out_dir: str | Path) -> Path:
    """Write results.json and report.md of a finished comparison again from its results.json
    alone (as `summarise` writes it), training and plotting nothing, with what a report now
    states (each difference's power): the report of a comparison whose runs are gone or cannot
    be trained again. Returns report.md."""
    out_dir = Path(out_dir)
    summary = add_power(json.loads((out_dir / "results.json").read_text()), RANGES)
    return write_summary_report(out_dir, summary, _recorded_settings(out_dir, summary))


def _recorded_settings(out_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """The settings a comparison's report was written with: `compare`'s record of them
    (compare_config.yaml), else, where only finished runs were reported (`report_finished`),
    the record of the baseline's first run (the same settings plus that arm's own)."""
    recorded = out_dir / "compare_config.yaml"
    if recorded.exists():
        return json.loads(recorded.read_text())["base"]
    first = next(run for run in summary["runs"].values() if run["algo"] == summary["algos"][0])
    record = out_dir / "runs" / Path(first["run_dir"]).name / "config.yaml"
    return yaml.safe_load(record.read_text(encoding="utf-8"))


def write_summary_report(out_dir: Path, summary: dict[str, Any], cfg: dict[str, Any]) -> Path:
    """Write ``summary`` as results.json and its report.md (`render_report`) into ``out_dir``."""
    write_file(out_dir / "results.json", jsonio.dumps(summary, indent=1), "the comparison's results")
    return write_file(out_dir / "report.md", render_report(summary, cfg), "the comparison's report")


def render_report(summary: dict[str, Any], cfg: dict[str, Any]) -> str:
    """report.md of a comparison from its summary (`summarise`, with `add_power`) and its
    settings (``cfg``: `orsd_gym.configio.to_dict` of its config)."""
    seeds = sorted({run["seed"] for run in summary["runs"].values()})
    lines = [
        f"# {' vs '.join(summary['algos'])} on {cfg['env']['id']}",
        "",
        *_setup_lines(summary, cfg, seeds),
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
    lines += _paired_lines(summary)
    lines += ["", "## How big is the effect?", ""] + (effect_statement(summary) or ["- only one algorithm was run."])
    gains = gain_lines(summary)
    if gains:
        lines += ["", "## Gain over the start (final minus start of the same run, same eval tasks)", "", *gains]
    lines += ["", "## Learning signal", "", *signal_lines(summary)]
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
    return "\n".join(lines)


def _setup_lines(summary: dict[str, Any], cfg: dict[str, Any], seeds: list[int]) -> list[str]:
    rollout = cfg["rollout"]
    budget = cfg["train"]["iterations"] * rollout["tasks_per_iteration"] * rollout["group_size"]
    lora = "on" if cfg["model"]["lora"]["enabled"] else "off"
    return [
        "## Setup",
        f"- model: `{cfg['model']['name']}` ({cfg['model']['dtype']}, LoRA {lora})",
        f"- env: `{cfg['env']['id']}` kwargs `{json.dumps(cfg['env']['kwargs'])}`",
        f"- seeds: {seeds}; per run {cfg['train']['iterations']} iterations x {rollout['tasks_per_iteration']} tasks "
        f"x group {rollout['group_size']} = {budget} training episodes (max {rollout['max_turns']} turns each)",
        *_task_lines(summary, cfg),
        *_warm_start_lines(cfg),
    ]


def _paired_lines(summary: dict[str, Any]) -> list[str]:
    """Each arm minus the baseline, paired by seed, each difference with its power (`power_tag`)."""
    if not summary["paired"]:
        return []
    lines = []
    for name, entry in summary["paired"].items():
        cells = []
        for label in RANGES:
            estimate = Estimate.from_dict(entry[f"final_{label}_diff"], _difference_bounds(label))
            cells.append(f"final {label} {estimate} ({power_tag(entry[f'final_{label}_power'])})")
        lines.append(f"- {name}: {', '.join(cells)}; per seed {entry['final_success_diffs']}")
    return [*lines, "", MDD_LEGEND]


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
