"""Comparison statistics and report writing on hand-made run results."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest

from orsd_gym.algos.base import ALGORITHMS, register_algorithm
from orsd_gym.algos.grpo import GRPO
from orsd_gym.experiments.compare import RunResult
from orsd_gym.experiments.power import minimum_detectable_difference
from orsd_gym.experiments.report import effect_statement, print_summary, rewrite_report, summarise, write_report
from orsd_gym.probes.chain import link_verdict
from orsd_gym.train.config import Config
from orsd_gym.train.stats import mean_ci, t_quantile

#: Student t quantiles as tables print them (3 decimals): t(0.975, df), t(0.80, df).
T975 = {1: 12.706, 2: 4.303, 30: 2.042, 95: 1.985, 1000: 1.962}
T80 = {2: 1.061, 5: 0.920, 30: 0.854}
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def t_two_df(p):
    """The exact t quantile at 2 degrees of freedom, which has a closed form."""
    return (2 * p - 1) / math.sqrt(2 * p * (1 - p))


def test_t_quantiles_are_exact_at_every_df():
    for df, value in T975.items():
        assert t_quantile(0.975, df) == pytest.approx(value, abs=5e-4)
    for df, value in T80.items():
        assert t_quantile(0.80, df) == pytest.approx(value, abs=5e-4)
    # Closed forms at 1 and 2 degrees of freedom; symmetry; the normal quantile in the limit.
    assert t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-10)
    assert t_quantile(0.9, 2) == pytest.approx(t_two_df(0.9), rel=1e-10)
    assert t_quantile(0.025, 7) == pytest.approx(-t_quantile(0.975, 7), rel=1e-12)
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-6)


def test_interval_uses_the_exact_t_quantile_above_30_degrees_of_freedom():
    values = [float(i % 2) for i in range(96)]  # 96 tasks won or lost: df 95
    sd = float(np.std(values, ddof=1))
    assert mean_ci(values).half_width == pytest.approx(1.985 * sd / math.sqrt(96), rel=2e-4)


def test_minimum_detectable_difference_is_the_paired_t_formula():
    # (t(0.975, 2) + t(0.80, 2)) x sd / sqrt(3) = (4.303 + 1.061) x 0.087 / sqrt(3)
    assert minimum_detectable_difference(0.087, 3) == pytest.approx(5.364 * 0.087 / math.sqrt(3), abs=1e-4)
    assert minimum_detectable_difference(0.1, 6) == pytest.approx((2.571 + 0.920) * 0.1 / math.sqrt(6), abs=1e-4)
    assert math.isnan(minimum_detectable_difference(0.1, 1))  # one seed: no spread to scale by
    assert math.isnan(minimum_detectable_difference(0.0, 3))


def test_mean_ci_matches_hand_computation():
    est = mean_ci([0.2, 0.4, 0.6])
    # mean 0.4, sd 0.2, t(0.975, 2) = 4.302653 -> half width 4.302653 * 0.2 / sqrt(3)
    assert est.mean == pytest.approx(0.4)
    assert est.half_width == pytest.approx(t_two_df(0.975) * 0.2 / math.sqrt(3))
    single = mean_ci([0.5])
    assert single.n == 1 and math.isnan(single.half_width)
    assert math.isnan(mean_ci([]).mean)


def _plan(seed, warnings=()):
    summary = {
        "partition": "floor plans",
        "eval_on": "held_out",
        "eval_kwargs": {"split": "generated_eval"},
        "eval_tasks": 3,
        "warnings": list(warnings),
    }
    keys = {
        "train": [f"e:train-{seed}", f"e:train-{seed + 1}"],
        "eval": ["e:eval-0", "e:eval-1", "e:eval-1"],
        "warm_start": ["e:train-9"],
    }
    return {"summary": summary, "keys": keys}


def _run(algo, seed, successes, tmp_path):
    evals = [
        {"iteration": i * 2, "env_steps": i * 100, "eval/success_rate": s, "eval/mean_return": s}
        for i, s in enumerate(successes)
    ]
    metrics = [
        {
            "iteration": 1,
            "algo/zero_adv_group_frac": 0.25,
            "loss/grad_norm": 4.0 if algo == "orsd" else 0.5,
            **({"orsd/rubric_frac": 0.5} if algo == "orsd" else {}),
        }
    ]
    return RunResult(algo, seed, tmp_path / f"{algo}{seed}", evals, metrics, _plan(seed))


def test_summary_pairs_by_seed_and_writes_report(tmp_path):
    results = [
        _run("grpo", 0, [0.0, 0.2, 0.1], tmp_path),
        _run("orsd", 0, [0.0, 0.3, 0.4], tmp_path),
        _run("grpo", 1, [0.1, 0.1, 0.3], tmp_path),
        _run("orsd", 1, [0.1, 0.5, 0.5], tmp_path),
    ]
    summary = summarise(results)
    assert summary["table"]["grpo"]["final_success"]["mean"] == pytest.approx(0.2)
    assert summary["table"]["orsd"]["best_success"]["mean"] == pytest.approx(0.45)
    paired = summary["paired"]["orsd - grpo"]
    assert paired["final_success_diffs"] == pytest.approx([0.3, 0.2])
    assert paired["final_success_diff"]["mean"] == pytest.approx(0.25)
    statement = effect_statement(summary)[0]
    # sd 0.0707, t(1) = 12.706 -> half width 0.635: two seeds cannot rule out noise here.
    assert "+0.250" in statement and "[-0.385, +0.885]" in statement
    assert "every seed goes the same way, but 2 seeds are too few" in statement
    # Over all runs: 2 distinct evaluation tasks, none of them trained on (training: 0..2 and 9).
    tasks = summary["tasks"]
    assert (tasks["eval_distinct"], tasks["train_distinct"], tasks["eval_train_overlap"]) == (2, 4, 0)
    report = write_report(tmp_path, Config(), results)
    text = report.read_text()
    assert "| orsd |" in text and "Paired differences" in text and "success_curve.png" in text
    assert "3 held-out tasks (2 distinct)" in text and "evaluation tasks that any run trained on: 0" in text
    assert "before clipping" in text and "orsd-seed1: 4.00" in text and "grpo-seed0: 0.50" in text
    assert (tmp_path / "success_curve.png").stat().st_size > 1000
    assert json.loads((tmp_path / "results.json").read_text())["algos"] == ["grpo", "orsd"]


def test_an_algorithm_of_ones_own_declares_what_the_report_keeps_and_says(tmp_path):
    class Greedy(GRPO):
        name = "greedy_report_test"
        run_summaries = {"greedy_temperature": "greedy/temperature"}

        @classmethod
        def signal_lines(cls, summary):
            kept = [
                f"{n}: {r['greedy_temperature']:.1f}" for n, r in summary["runs"].items() if r["greedy_temperature"]
            ]
            return ["Greedy's temperature, per run: " + ", ".join(kept) + "."]

    register_algorithm(Greedy)
    try:
        results = [_run("grpo", 0, [0.0, 0.2], tmp_path), _run("greedy_report_test", 0, [0.0, 0.3], tmp_path)]
        results[1].metrics[0]["greedy/temperature"] = 0.5
        summary = summarise(results)
        assert summary["runs"]["greedy_report_test-seed0"]["greedy_temperature"] == 0.5
        assert summary["runs"]["grpo-seed0"]["greedy_temperature"] is None
        text = write_report(tmp_path, Config(), results).read_text()
        assert "Greedy's temperature, per run: greedy_report_test-seed0: 0.5." in text
    finally:
        del ALGORITHMS["greedy_report_test"]


def test_report_counts_overlap_across_runs_and_repeats_warnings(tmp_path):
    leaky = _run("grpo", 0, [0.0, 0.5], tmp_path)
    leaky.plan["keys"]["train"].append("e:eval-1")
    leaky.plan["summary"]["warnings"] = ["env declares no partition"]
    text = write_report(tmp_path, Config(), [leaky, _run("orsd", 0, [0.0, 0.5], tmp_path)]).read_text()
    assert "evaluation tasks that any run trained on: 1" in text
    assert "**warning**: env declares no partition" in text


def test_effect_needs_enough_seeds_before_it_is_called_larger_than_noise(tmp_path):
    # Two seeds with the same difference give a zero-width interval, which proves nothing.
    two = [_run(a, seed, [0.0, x], tmp_path) for seed in (0, 1) for a, x in (("grpo", 1.0), ("orsd", 0.0))]
    statement = effect_statement(summarise(two))[0]
    assert "[-1.000, -1.000]" in statement and "2 seeds are too few" in statement
    assert "larger than seed noise" not in statement
    three = [
        _run(a, seed, [0.0, x + seed / 100], tmp_path) for seed in (0, 1, 2) for a, x in (("grpo", 0.2), ("orsd", 0.6))
    ]
    assert "excludes zero: the difference is larger than seed noise" in effect_statement(summarise(three))[0]
    # Three seeds that differ by the same one task: still no width, so no claim.
    same = [_run(a, seed, [0.0, x], tmp_path) for seed in (0, 1, 2) for a, x in (("grpo", 1 / 3), ("orsd", 0.0))]
    statement = effect_statement(summarise(same))[0]
    assert "-0.333, 1 of 3 held-out tasks, on every one of 3 seeds" in statement
    assert "larger than seed noise" not in statement


def test_the_report_says_which_link_of_the_chain_holds(tmp_path):
    results = []
    for seed, (gain, alignment, ratio) in enumerate([(0.25, 0.02, 2.0), (0.125, 0.03, 3.0), (0.20, 0.01, 2.5)]):
        run = _run("orsd", seed, [0.1, 0.2], tmp_path)
        for record in run.evals:
            record.update({"teacher/gain": gain, "teacher/gain_vs_other": gain / 2})
        run.metrics[0].update(
            {"orsd/credit_alignment": alignment, "grad_share/correction_ratio": ratio, "grad_share/cosine": -0.1}
        )
        results.append(run)
    results.append(_run("grpo", 0, [0.1, 0.2], tmp_path))  # measured nothing: no row
    # A GRPO run whose gradient share was measured has no correction: it must not enter the links
    # about the correction (its ratio 0 would pull ORSD's below 1).
    measured_grpo = _run("grpo", 1, [0.1, 0.2], tmp_path)
    measured_grpo.metrics[0]["grad_share/correction_ratio"] = 0.0
    results.append(measured_grpo)
    single = _run("orsd", 0, [0.1, 0.2], tmp_path)  # an arm with one finished seed: its value, no interval
    single.algo = "orsd:expert"
    single.metrics[0]["grad_share/correction_ratio"] = 0.5
    results.append(single)
    summary = summarise(results)
    assert summary["runs"]["orsd-seed1"]["teacher_gain"] == pytest.approx(0.125)
    assert summary["runs"]["orsd-seed2"]["correction_ratio"] == pytest.approx(2.5)
    text = write_report(tmp_path, Config(), results).read_text()
    assert "| orsd-seed0 | +0.250 | +0.125 | n/a | +0.0200 | 2.00 | -0.10 | n/a |" in text
    assert "grpo-seed0 |" not in text.split("Does the method's chain hold?")[1].split("\n\n")[1]
    verdicts = {line.split("**")[1]: line for line in text.splitlines() if line.startswith("- **")}
    # teacher gain 0.1917 +- 4.303 * 0.0629 / sqrt 3 = [0.035, 0.348]: above 0, holds;
    # alignment 0.02 +- 4.303 * 0.01 / sqrt 3 = [-0.005, 0.045]: contains 0, not resolved;
    # ratio 2.5 +- 4.303 * 0.5 / sqrt 3 = [1.258, 3.742]: above 1, fails.
    assert verdicts["orsd"] == "- **orsd**: holds: teacher; fails: share; not resolved: alignment."
    assert "stays below the outcome's: fails (2.500 [1.258, 3.742] over 3 seeds; needs < 1)" in text
    # GRPO is judged on the teacher test only, here not measured.
    assert verdicts["grpo"] == "- **grpo**: not measured: teacher."
    assert "stays below the outcome's: one seed: no interval (+0.500; needs < 1)" in text


def test_link_verdicts_separate_failing_from_unresolved():
    assert link_verdict(mean_ci([0.1, 0.12, 0.11]), 0.0, ">") == "holds"
    assert link_verdict(mean_ci([-0.1, -0.12, -0.11]), 0.0, ">") == "fails"
    assert link_verdict(mean_ci([-0.1, 0.12, 0.01]), 0.0, ">") == "not resolved"
    assert link_verdict(mean_ci([0.5, 0.6, 0.55]), 1.0, "<") == "holds"
    assert link_verdict(mean_ci([0.5]), 1.0, "<") == "one seed: no interval"
    assert link_verdict(mean_ci([]), 1.0, "<") == "not measured"


def _strict(text):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_results_json_is_strict_json_with_one_seed(tmp_path):
    from rich.console import Console

    from orsd_gym import jsonio

    report = write_report(
        tmp_path, Config(), [_run("grpo", 0, [0.0, 0.2], tmp_path), _run("orsd", 0, [0.0, 0.4], tmp_path)]
    )
    summary = _strict((tmp_path / "results.json").read_text())
    assert summary["table"]["grpo"]["final_success"]["ci95"] is None  # one seed: no interval, not NaN
    console = Console(record=True, width=200)
    print_summary(report, console)  # reads the nulls back
    assert "n=1: no interval" in console.export_text()
    assert _strict(jsonio.dumps({"a": float("nan"), "b": [float("inf"), 1.5]})) == {"a": None, "b": [None, 1.5]}


def test_equal_curves_are_drawn_with_equal_values_inside_the_metric_range(tmp_path):
    from orsd_gym.experiments.plots import plot_curves

    results = [_run(algo, 0, [0.0, 0.5, 0.5], tmp_path) for algo in ("grpo", "orsd", "orsd:expert")]
    drawn = plot_curves(summarise(results), tmp_path / "curve.png", "eval/success_rate", "success")
    lines = list(drawn["lines"].values())
    assert len(lines) == 3 and all(list(line) == [0.0, 0.5, 0.5] for line in lines)
    assert drawn["ylim"] == (0.0, 1.0)  # never below 0 or above 1, however close the curves
    assert "drawn a few points apart" in write_report(tmp_path, Config(), results).read_text()


def test_one_seed_curves_span_their_environment_steps(tmp_path):
    """Without a seed band the x-axis still covers every evaluation (it once collapsed to +-0.05)."""
    from orsd_gym.experiments.plots import plot_curves

    results = [_run(algo, 0, [0.0, 0.2, 0.4], tmp_path) for algo in ("grpo", "orsd")]
    drawn = plot_curves(summarise(results), tmp_path / "curve.png", "eval/success_rate", "success")
    low, high = drawn["xlim"]
    assert low <= 0 and 200 <= high < 250  # the evaluations sit at 0, 100 and 200 environment steps


def test_each_algorithm_gain_over_its_start_is_paired_by_run(tmp_path):
    results = [
        _run("grpo", 0, [0.1, 0.2, 0.3], tmp_path),
        _run("grpo", 1, [0.4, 0.4, 0.5], tmp_path),
        _run("grpo", 2, [0.0, 0.1, 0.15], tmp_path),
        # Evaluated once (as `random` is): no gain to report.
        _run("random", 0, [0.05], tmp_path),
        _run("random", 1, [0.05], tmp_path),
        _run("random", 2, [0.05], tmp_path),
    ]
    summary = summarise(results)
    grpo = summary["table"]["grpo"]
    assert grpo["gain_score_diffs"] == pytest.approx([0.2, 0.1, 0.15])
    # mean 0.15, sd 0.05, t(0.975, 2) = 4.302653 -> half width 0.124: above zero.
    assert grpo["gain_score"]["mean"] == pytest.approx(0.15)
    assert grpo["gain_score"]["ci95"] == pytest.approx(t_two_df(0.975) * 0.05 / math.sqrt(3))
    assert summary["table"]["random"]["gain_score"]["n"] == 0
    text = write_report(tmp_path, Config(), results).read_text()
    section = text.split("## Gain over the start")[1].split("##")[0]
    assert "- grpo: score 0.150 [0.026, 0.274]" in section and "it learned" in section
    assert "random" not in section
    assert "| start score |" in text


def test_identical_seeds_are_read_against_what_the_design_could_detect(tmp_path):
    # Both arms end equal on every seed, and GRPO's final success varies across seeds.
    finals = {0: 0.2, 1: 0.5, 2: 0.8}
    results = [_run(a, seed, [0.0, x], tmp_path) for seed, x in finals.items() for a in ("grpo", "orsd")]
    summary = summarise(results)
    statement = effect_statement(summary)[0]
    assert "identical final success on every one of 3 seeds" in statement
    assert "no measurable effect" not in statement and "no effect" not in statement
    # The paired differences do not vary: the MDD comes from GRPO's final sd (0.3), as stated:
    # (4.303 + 1.061) x 0.3 / sqrt(3) = 0.929, below the headroom 1 - 0 above the start.
    power = summary["paired"]["orsd - grpo"]["final_success_power"]
    assert power["mdd"] == pytest.approx(5.364 * 0.3 / math.sqrt(3), abs=1e-3)
    assert power["sd_from"] == "grpo's final success across seeds" and power["headroom"] == pytest.approx(1.0)
    assert "from the sd of grpo's final success across seeds (0.300) this design detects a difference of 0.929" in (
        statement
    )
    assert "could not have detected" not in statement
    # One seed: nothing to compute an MDD from, and the report says so.
    single = effect_statement(summarise([_run(a, 0, [0.5, 0.5], tmp_path) for a in ("grpo", "orsd")]))[0]
    assert "not computable with 1 seed" in single and "no measurable effect" not in single


def _recorded_comparison(study, tmp_path):
    """A committed comparison's results.json and the record of its settings, copied to ``tmp_path``."""
    source = RESULTS / study
    recorded = json.loads((source / "results.json").read_text())
    shutil.copy(source / "results.json", tmp_path / "results.json")
    if (source / "compare_config.yaml").exists():
        shutil.copy(source / "compare_config.yaml", tmp_path / "compare_config.yaml")
    else:  # reported by `report_finished`: the baseline's first run holds the settings
        first = next(r for r in recorded["runs"].values() if r["algo"] == recorded["algos"][0])
        run = Path(first["run_dir"]).name
        (tmp_path / "runs" / run).mkdir(parents=True)
        shutil.copy(source / "runs" / run / "config.yaml", tmp_path / "runs" / run / "config.yaml")
    return recorded


def _hand_power(recorded, diffs, label):
    """The MDD and headroom of a 3-seed paired difference by hand: tabulated t quantiles, the sd
    of the paired differences, else of the baseline's final value across seeds (None: neither varies)."""
    baseline = [r["curve"] for r in recorded["runs"].values() if r["algo"] == recorded["algos"][0]]
    key = {"success": "eval/success_rate", "score": "eval/mean_return"}[label]
    sd = statistics.stdev(diffs) or statistics.stdev(curve[-1][key] for curve in baseline)
    mdd = (T975[2] + T80[2]) * sd / math.sqrt(3) if sd else None
    return mdd, 1 - statistics.mean(curve[0][key] for curve in baseline)


@pytest.mark.parametrize(
    ("study", "expected"),
    [
        # orsd:expert - grpo: per seed +0.042, 0, -0.125 (sd 0.087); the start leaves 0.097.
        ("orsd_study_v2", "orsd:expert - grpo: final success -0.028 [-0.243, 0.188] (MDD 0.269 exceeds the headroom"),
        ("webshop_cpu", "random - grpo: final success -0.031 [-0.031, -0.031] (MDD not computable: nothing varies"),
    ],
)
def test_every_difference_of_a_recorded_comparison_states_its_power(study, expected, tmp_path):
    recorded = _recorded_comparison(study, tmp_path)
    text = rewrite_report(tmp_path).read_text()
    assert expected in text
    assert "no measurable effect" not in text and "no effect" not in text
    written = json.loads((tmp_path / "results.json").read_text())
    section = text.split("## Paired differences")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(lines) == len(recorded["paired"]) > 0
    for line, (name, entry) in zip(lines, recorded["paired"].items()):
        assert line.startswith(f"- {name}: ") and line.count("MDD") == 2
        for label in ("success", "score"):
            assert len(entry[f"final_{label}_diffs"]) == 3
            mdd, headroom = _hand_power(recorded, entry[f"final_{label}_diffs"], label)
            # The cell's tag: "MDD 0.269 exceeds the headroom 0.097", "MDD 0.074, headroom 0.097", ...
            tag = re.search(rf"final {label} [^(]*\(MDD (.*?)\)(, final|; per seed)", line).group(1)
            power = written["paired"][name][f"final_{label}_power"]
            assert float(re.search(r"headroom ([0-9.]+)$", tag).group(1)) == pytest.approx(headroom, abs=6e-4)
            assert power["headroom"] == pytest.approx(headroom)
            if mdd is None:
                assert tag.startswith("not computable") and power["mdd"] is None
            else:
                assert float(re.match(r"[0-9.]+", tag).group()) == pytest.approx(mdd, abs=1.5e-3)
                assert power["mdd"] == pytest.approx(mdd, abs=1e-3)
    effects = text.split("## How big is the effect?")[1].split("\n## ")[0]
    statements = [line for line in effects.splitlines() if line.startswith("- ")]
    assert len(statements) == len(lines)
    assert all("this design detects a difference of" in s or "not computable" in s for s in statements)
    gains = text.split("## Gain over the start")[1].split("\n## ")[0]
    assert all(line.count("(MDD ") == 2 for line in gains.splitlines() if line.startswith("- "))
