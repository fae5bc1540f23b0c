"""Comparison statistics and report writing on hand-made run results."""

from __future__ import annotations

import json
import math

import pytest

from orsd_gym.experiments.compare import RunResult
from orsd_gym.experiments.report import effect_statement, link_verdict, print_summary, summarise, write_report
from orsd_gym.train.config import Config
from orsd_gym.train.stats import mean_ci


def test_mean_ci_matches_hand_computation():
    est = mean_ci([0.2, 0.4, 0.6])
    # mean 0.4, sd 0.2, t(2) = 4.303 -> half width 4.303 * 0.2 / sqrt(3)
    assert est.mean == pytest.approx(0.4)
    assert est.half_width == pytest.approx(4.303 * 0.2 / math.sqrt(3))
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
    # mean 0.15, sd 0.05, t(2) = 4.303 -> half width 0.124: above zero.
    assert grpo["gain_score"]["mean"] == pytest.approx(0.15)
    assert grpo["gain_score"]["ci95"] == pytest.approx(4.303 * 0.05 / math.sqrt(3))
    assert summary["table"]["random"]["gain_score"]["n"] == 0
    text = write_report(tmp_path, Config(), results).read_text()
    section = text.split("## Gain over the start")[1].split("##")[0]
    assert "- grpo: score 0.150 [0.026, 0.274]" in section and "it learned" in section
    assert "random" not in section
    assert "| start score |" in text
