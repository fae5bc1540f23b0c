"""Study v3: GRPO vs GiGPO vs ORSD with the expert's rubric on WebShop, pre-registered and powered
(benchmarks/results/orsd_study_v3/PLAN.md says what is run, what is measured and what stops it).

SmolLM2-135M with LoRA on WebShop (`webshop_cpu` on the official small product set, as that
preset's committed records: ``--data-dir``, by default ``../shared/data/webshop``; ``--data-dir
embedded`` plays the embedded synthetic catalog instead, for a smoke test), where GRPO learns
on every seed and the expert's rubric is the literal plan (the query, the product,
its options). One warm start, shared by every arm and seed: 48 expert demonstrations of seed
0's training goals, half with their expert rubric in the system prompt (``rubric-48``, as
ALFWorld's), so that the policy learns to read a plan.

* ``gate`` (stage 1): trains that warm start and puts it to the teacher test on the first
  ``--gate-tasks`` held-out goals of the seeded evaluation order (`teacher_gate.py`'s cells,
  ``--out``/gate).
* ``compare`` (stage 2): every arm and seed from the gated warm start, evaluated on the
  ``eval.num_tasks`` held-out goals after the gate's (``eval.skip_tasks``), at the start and the
  end. Before any run it checks, from every seed's task plan, that these goals are disjoint from
  the gate's, the demonstrations' and every training goal. After ``--interim-after`` seeds, an
  arm whose mean paired final score minus grpo's is <= 0 stops (futility; recorded in
  ``interim.json``); the others run the remaining seeds. Every finished run gets the
  distillation probe (`orsd_gym.experiments.distillation`) from its kept checkpoint.
  ``--add-on`` runs ``orsd`` and ``orsd:shuffled`` on every seed, and only where ``orsd:expert``
  beats grpo (its paired interval above 0).
* ``report``: the report of what has finished, training nothing.

    python benchmarks/studies/orsd_study_v3.py gate --out benchmarks/results/orsd_study_v3
    python benchmarks/studies/orsd_study_v3.py compare --out benchmarks/results/orsd_study_v3
    python benchmarks/studies/orsd_study_v3.py report --out benchmarks/results/orsd_study_v3

Every stage resumes: run the same command again and finished cells and runs are kept (a run
continues from its checkpoint). ``--out`` gets the comparison's report (report.md with the
study's own section, results.json, curves), gate/ (gate.json, gate.md), interim.json, each
run's probe.json, and study.json (the commit and command of every invocation, the arms, the
interim decision, the task-plan check, the gate and the probe). Trailing ``KEY=VALUE``
overrides apply to every run and cell.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from orsd_study import Design, head_commit, write_study_record
from safetensors.torch import load_file
from teacher_gate import Cell, gate_report, run_gate

from orsd_gym import configio
from orsd_gym.cli import run_reporting_errors
from orsd_gym.errors import UsageError
from orsd_gym.experiments.compare import Arm, compare, finished_runs, report_finished, run_config
from orsd_gym.experiments.distillation import (
    cached_states,
    expert_logprob,
    final_weights,
    policy_with,
    probe_change,
)
from orsd_gym.experiments.power import MDD_LEGEND, power_tag
from orsd_gym.experiments.report import summarise
from orsd_gym.train.checkpoint import list_checkpoints
from orsd_gym.train.config import Config
from orsd_gym.train.plan import build_task_plan
from orsd_gym.train.stats import mean_ci, number_or_nan

BASELINE = "grpo"
ARMS = [BASELINE, "gigpo", "orsd:expert"]
#: Run only where orsd:expert beats grpo: ORSD with self-written rubrics, and its negative control.
ADD_ON_ARMS = ["orsd", "orsd:shuffled"]
#: The primary endpoint's metric (results.json's label: held-out mean score).
PRIMARY = "score"
SETTING, PLACEMENT = "rubric-48", "system"
#: The seed whose demonstrations the shared warm start clones (and whose task plan lists them).
WARM_START_SEED = 0
GATE_TASKS = 96
#: Held-out goals the distillation probe plays the expert on (the first of the study's own).
PROBE_TASKS = 32
#: Where the official small product set lies by default (the workspace's shared data).
OFFICIAL_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "webshop"
STUDY = [
    # The env reports its expert's plan: ORSD's expert arm reads it at reset, and every step
    # gives ORSD's credit alignment.
    "env.kwargs.expert=true",
    "eval.num_tasks=96",
    "train.iterations=6",
    "eval.every=6",  # the start and the end
    "algo.per_algo.orsd={num_bundles: 3, max_criteria: 3, rubric_placement: system, beta: 0.5, "
    "delta_scale: bounded, correction_bound: 0.5, center_delta: true}",
    "logging.tensorboard=false",
    "train.keep_checkpoints=1",  # the probe reads a finished run's final weights from it
]
V3 = Design(
    "webshop_cpu",
    STUDY,
    {
        SETTING: [
            "warm_start.episodes=48",
            "probes.rubric_demonstrations.share=0.5",
            f"probes.rubric_demonstrations.placement={PLACEMENT}",
            "probes.rubric_demonstrations.max_criteria=3",
        ]
    },
)


def data_overrides(data_dir: str) -> list[str]:
    """The product set every run and gate cell plays: the official files in ``data_dir`` (the
    training, evaluation and warm-start sides), or the embedded catalog for ``embedded``."""
    if data_dir == "embedded":
        return []
    if not (Path(data_dir) / "items_shuffle_1000.json").is_file():
        raise UsageError(
            f"--data-dir {data_dir}: WebShop's official small product set is not there (items_shuffle_1000.json); "
            "the study runs on it, as webshop_cpu's records did: pass the directory that holds it "
            "(or --data-dir embedded for a smoke test on the synthetic catalog)"
        )
    return [f"env.kwargs.data_dir={data_dir}", f"eval.env_kwargs.data_dir={data_dir}"]


def warm_start_file(out: Path) -> Path:
    return out / "warm_start" / f"{SETTING}-{PLACEMENT}-seed{WARM_START_SEED}.safetensors"


def study_overrides(out: Path, gate_tasks: int, extra: Sequence[str]) -> list[str]:
    """Every run's settings: the study's, its warm start (shared, seed 0's) and the held-out
    goals after the gate's."""
    return [
        *V3.study,
        *V3.settings[SETTING],
        f"warm_start.path={warm_start_file(out)}",
        f"warm_start.seed={WARM_START_SEED}",
        f"eval.skip_tasks={gate_tasks}",
        *extra,
    ]


def gate_cell(gate_tasks: int) -> Cell:
    return Cell(SETTING, PLACEMENT, gate_tasks, WARM_START_SEED)


def read_gate(out: Path) -> dict:
    path = out / "gate" / "gate.json"
    return json.loads(path.read_text()) if path.is_file() else {"cells": {}, "runs": []}


def require_gated(out: Path, gate: Mapping[str, Any], gate_tasks: int) -> None:
    """Stage 2 trains from the warm start stage 1 gated, or not at all."""
    cell = gate_cell(gate_tasks)
    if cell.name not in gate["cells"] or not warm_start_file(out).is_file():
        raise UsageError(
            f"the warm start is not gated: run stage 1 first (orsd_study_v3.py gate --out {out} "
            f"--gate-tasks {gate_tasks}); gate.json has no cell {cell.name} or {warm_start_file(out)} is missing"
        )


def task_overlaps(base: Config, seeds: Sequence[int], out: Path, gate: Mapping[str, Any]) -> dict[str, int]:
    """The study's evaluation goals against the goals the gate played, the demonstrations and
    every seed's training goals (from the task plans the runs will run); fails on any overlap."""
    evaluation: set[str] = set()
    demonstrations: set[str] = set()
    training: set[str] = set()
    for seed in seeds:
        keys = build_task_plan(run_config(base, Arm.parse(BASELINE), seed, out)).keys()
        evaluation |= set(keys["eval"])
        demonstrations |= set(keys["warm_start"])
        training |= set(keys["train"])
    # The teacher test names a goal by its env's task key, the plan by the env id and that key.
    gated = {f"{base.env.id}:{task}" for cell in gate["cells"].values() for task in cell["success"]["none"]}
    counts = {
        "eval_tasks": len(evaluation),
        "gate_tasks": len(gated),
        "demonstrations": len(demonstrations),
        "training_tasks": len(training),
        "eval_and_gate": len(evaluation & gated),
        "eval_and_demonstrations": len(evaluation & demonstrations),
        "eval_and_training": len(evaluation & training),
        "training_and_demonstrations": len(training & demonstrations),
    }
    shared = {name: n for name, n in counts.items() if "_and_" in name and n}
    if shared:
        raise UsageError(f"the task plan is not disjoint: {', '.join(f'{k} {n}' for k, n in shared.items())}")
    return counts


def futile(diffs: Sequence[float]) -> bool:
    """The interim look's stop rule: an arm whose mean paired difference from grpo is <= 0."""
    return bool(np.mean(diffs) <= 0)


def interim_look(base: Config, arms: Sequence[str], seeds: Sequence[int], out: Path) -> dict:
    """The decision after the first seeds, made once (``interim.json``) and then read back, so
    a resumed study continues what it decided."""
    path = out / "interim.json"
    if path.is_file():
        return json.loads(path.read_text())
    results, left_out = finished_runs(base, list(arms), list(seeds), out)
    if left_out:
        raise UsageError(f"the interim look needs every run of seeds {list(seeds)}; not finished: {left_out}")
    paired = summarise(results)["paired"]
    decisions = {}
    for arm in arms[1:]:
        diffs = paired[f"{arm} - {BASELINE}"][f"final_{PRIMARY}_diffs"]
        decisions[arm] = {"diffs": diffs, "mean": float(np.mean(diffs)), "stopped": futile(diffs)}
    record = {"seeds": list(seeds), "metric": f"final {PRIMARY}", "rule": "stop when mean <= 0", "arms": decisions}
    path.write_text(json.dumps(record, indent=1))
    return record


def probe_runs(base: Config, arms: Sequence[str], seeds: Sequence[int], out: Path, probe_tasks: int) -> None:
    """The distillation probe of every finished run that has none yet (``probe.json`` in its
    run directory), from the shared warm start (scored once) to the run's kept final checkpoint."""
    results, _ = finished_runs(base, list(arms), list(seeds), out)
    pending = [r for r in results if list_checkpoints(r.run_dir / "checkpoints")]
    pending = [r for r in pending if not (r.run_dir / "probe.json").is_file()]
    if not pending:
        return
    probe_dir = out / "distillation"
    states = cached_states(base, probe_tasks, probe_dir / "expert_states.jsonl")
    start_path = probe_dir / "warm_start_score.json"
    if not start_path.is_file():
        start = expert_logprob(policy_with(base, load_file(warm_start_file(out))), states)
        start_path.write_text(json.dumps(start, indent=1))
    start = json.loads(start_path.read_text())
    for result in pending:
        config = run_config(base, Arm.parse(result.algo), result.seed, out)
        end = expert_logprob(policy_with(config, final_weights(result.run_dir)), states)
        (result.run_dir / "probe.json").write_text(json.dumps(probe_change(start, end), indent=1))


def read_probes(base: Config, arms: Sequence[str], seeds: Sequence[int], out: Path) -> dict[str, dict[int, dict]]:
    """Arm -> seed -> probe.json, for the finished runs that have one."""
    results, _ = finished_runs(base, list(arms), list(seeds), out)
    probes: dict[str, dict[int, dict]] = {}
    for r in results:
        path = r.run_dir / "probe.json"
        if path.is_file():
            probes.setdefault(r.algo, {})[r.seed] = json.loads(path.read_text())
    return probes


def probe_summary(probes: Mapping[str, Mapping[int, Mapping[str, float]]]) -> dict[str, Any]:
    """Per arm: the probe's change (end - start) over seeds; per other arm: paired minus grpo's."""
    summary: dict[str, Any] = {"arms": {}, "paired": {}}
    for arm, by_seed in probes.items():
        changes = [by_seed[s]["change"] for s in sorted(by_seed)]
        summary["arms"][arm] = {"seeds": sorted(by_seed), "changes": changes, "change": mean_ci(changes).as_dict()}
    base = probes.get(BASELINE, {})
    for arm, by_seed in probes.items():
        if arm == BASELINE:
            continue
        diffs = [by_seed[s]["change"] - base[s]["change"] for s in sorted(by_seed) if s in base]
        summary["paired"][f"{arm} - {BASELINE}"] = {"diffs": diffs, "diff": mean_ci(diffs).as_dict()}
    return summary


def _span(estimate: Mapping[str, float]) -> str:
    low, high = estimate["low"], estimate["high"]
    interval = f" [{low:+.3f}, {high:+.3f}]" if estimate["n"] >= 2 and math.isfinite(low) else ""
    return f"{estimate['mean']:+.3f}{interval}"


def verdict(estimate: Mapping[str, float], power: Mapping[str, Any]) -> str:
    """What a paired difference says, and what it does not."""
    if estimate["n"] < 2:
        return "one seed: no interval"
    if estimate["low"] > 0:
        return "beats grpo (95% interval above 0)"
    if estimate["high"] < 0:
        return "worse than grpo (95% interval below 0)"
    mdd = number_or_nan(power.get("mdd"))
    seen = "" if math.isnan(mdd) else f"; a true difference of {mdd:.3f} or more is detected with 80% power"
    return (
        f"unresolved: not told apart from seed noise; differences outside "
        f"[{estimate['low']:+.3f}, {estimate['high']:+.3f}] are excluded at 95%{seen}"
    )


def plan_deviations(out: Path) -> list[str]:
    """The lines of PLAN.md's deviations section: the report lists them beside the results they
    affect, as the plan is what the results are judged against."""
    plan = out / "PLAN.md"
    if not plan.is_file():
        return [f"No PLAN.md in {out}: the design these results would be judged against is not recorded."]
    _, found, rest = plan.read_text().partition("\n## Deviations\n")
    section = rest.split("\n## ")[0].strip() if found else ""
    return section.splitlines() if section else ["None: the study ran as PLAN.md says."]


def study_section(
    results: Mapping[str, Any],
    interim: Mapping[str, Any] | None,
    gate: Mapping[str, Any],
    probes: Mapping[str, Any],
    overlaps: Mapping[str, int],
    deviations: Sequence[str],
) -> str:
    """report.md's study section: the primary endpoint per arm with its interval and MDD, the
    interim decision, the gate per seed, mixed-group shares, the distillation probe and the
    deviations from the plan."""
    lines = ["", "## Study v3 (pre-registered in PLAN.md)", ""]
    lines += [f"### Primary endpoint: paired final held-out {PRIMARY}", ""]
    for name, entry in results["paired"].items():
        estimate, power = entry[f"final_{PRIMARY}_diff"], entry[f"final_{PRIMARY}_power"]
        diffs = ", ".join(f"{d:+.3f}" for d in entry[f"final_{PRIMARY}_diffs"])
        lines.append(
            f"- {name}: {_span(estimate)} over {estimate['n']} seeds ({power_tag(power)}); per seed {diffs}; "
            f"{verdict(estimate, power)}"
        )
    lines += ["", MDD_LEGEND, "", "### Interim look"]
    if interim is None:
        lines.append("Not reached yet.")
    else:
        lines.append(f"After seeds {interim['seeds']} ({interim['rule']}, on the {interim['metric']} minus grpo's):")
        for arm, decision in interim["arms"].items():
            state = "stopped for futility" if decision["stopped"] else "continued"
            lines.append(f"- {arm}: mean {decision['mean']:+.3f} (per seed {decision['diffs']}): {state}")
    lines += ["", "### Gate (teacher test of the warm start every seed trains from)"]
    lines += [_gate_line(seed, entry) for seed, entry in gate.items()]
    lines += ["", "### Mixed-group shares (groups with a learning signal)"]
    for name, run in results["runs"].items():
        share = run.get("mixed_group_frac")
        lines.append(f"- {name}: {share:.2f}" if isinstance(share, float) else f"- {name}: not recorded")
    lines += ["", "### Distillation probe (expert's next action's log-prob per token, no rubric; end - start)"]
    for arm, entry in probes["arms"].items():
        lines.append(f"- {arm}: {_span(entry['change'])} (seeds {entry['seeds']})")
    for name, entry in probes["paired"].items():
        lines.append(f"- {name}: {_span(entry['diff'])} paired over {entry['diff']['n']} seeds")
    if not probes["arms"]:
        lines.append("- not measured yet")
    lines += ["", "### Task plan", "", ", ".join(f"{k}: {n}" for k, n in overlaps.items())]
    lines += ["", "### Deviations from the plan (PLAN.md)", "", *deviations]
    return "\n".join(lines) + "\n"


def gate_per_seed(gate: Mapping[str, Any], seeds: Sequence[int], gate_tasks: int) -> dict[str, dict[str, Any]]:
    """Seed -> the gate of the warm start it trains from (every seed: the shared one), pass or fail."""
    name = gate_cell(gate_tasks).name
    cell = gate_report(gate, [WARM_START_SEED])["cells"].get(name) if gate["cells"] else None
    if cell is None:
        return {str(seed): {"warm_start": name, "verdict": "not gated"} for seed in seeds}
    keep = ("verdict", "fresh_tasks", "success", "gain", "gain_vs_other", "won", "lost")
    return {str(seed): {"warm_start": name, **{k: cell[k] for k in keep}} for seed in seeds}


def _gate_line(seed: str, gate: Mapping[str, Any]) -> str:
    if gate["verdict"] == "not gated":
        return f"- seed {seed}: warm start {gate['warm_start']} not gated"
    return (
        f"- seed {seed}: warm start {gate['warm_start']}: {gate['verdict']} on {gate['fresh_tasks']} fresh goals; "
        f"expert rubric - none {_span(gate['gain'])}, expert - another goal's {_span(gate['gain_vs_other'])} "
        f"(success none {gate['success']['none']:.3f}, expert {gate['success']['own']:.3f})"
    )


def report(base: Config, arms: Sequence[str], seeds: Sequence[int], out: Path, gate_tasks: int) -> dict:
    """Write the report of everything finished (report.md with the study section); returns the
    study's record of it."""
    gate = read_gate(out)
    overlaps = task_overlaps(base, seeds, out, gate)
    path, left_out = report_finished(base, list(arms), list(seeds), out)
    results = json.loads((out / "results.json").read_text())
    interim_path = out / "interim.json"
    interim = json.loads(interim_path.read_text()) if interim_path.is_file() else None
    per_seed = gate_per_seed(gate, seeds, gate_tasks)
    probes = probe_summary(read_probes(base, arms, seeds, out))
    section = study_section(results, interim, per_seed, probes, overlaps, plan_deviations(out))
    path.write_text(path.read_text() + section)
    return {"left_out": left_out, "interim": interim, "gate": per_seed, "probe": probes, "task_plan": overlaps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["gate", "compare", "report"])
    parser.add_argument("--out", default="benchmarks/results/orsd_study_v3")
    parser.add_argument("--runs", default="runs/orsd_study_v3", help="the gate's run directories")
    parser.add_argument("--seeds", type=int, default=6, help="seeds 0..N-1")
    parser.add_argument("--interim-after", type=int, default=3, help="seeds before the interim look")
    parser.add_argument("--gate-tasks", type=int, default=GATE_TASKS, help="held-out goals the gate plays first")
    parser.add_argument("--probe-tasks", type=int, default=PROBE_TASKS)
    parser.add_argument("--add-on", action="store_true", help=f"run {' and '.join(ADD_ON_ARMS)} (if orsd:expert won)")
    parser.add_argument("--data-dir", default=str(OFFICIAL_DATA), help="WebShop's official small product set")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_intermixed_args()
    out = Path(args.out)
    started = time.perf_counter()
    commit = head_commit()
    extra = [*data_overrides(args.data_dir), *args.overrides]
    overrides = study_overrides(out, args.gate_tasks, extra)
    seeds = list(range(args.seeds))
    if args.stage == "gate":
        cell = gate_cell(args.gate_tasks)
        run_gate(out / "gate", [cell], [WARM_START_SEED], Path(args.runs), extra, design=V3,
                 warm_start=warm_start_file(out))  # fmt: skip
        record: dict[str, Any] = {"gate": gate_report(read_gate(out), [WARM_START_SEED])["warm_starts"]}
    else:
        base = configio.load(Config, V3.preset, [*overrides, "logging.live=false"])
        gate = read_gate(out)
        require_gated(out, gate, args.gate_tasks)
        arms = ARMS + (ADD_ON_ARMS if args.add_on else [])
        if args.stage == "compare":
            task_overlaps(base, seeds, out, gate)  # before any run
            train_stage(base, args, out, seeds)
        record = report(base, arms, seeds, out, args.gate_tasks)
    _record_invocation(out, commit, args, overrides, record, time.perf_counter() - started)
    return 0


def train_stage(base: Config, args: argparse.Namespace, out: Path, seeds: list[int]) -> None:
    """The interim seeds with every arm, the look, the remaining seeds with the arms it kept;
    with ``--add-on``, the add-on arms on every seed where orsd:expert beat grpo."""
    first, rest = seeds[: args.interim_after], seeds[args.interim_after :]
    compare(base, ARMS, first, out, live=False)
    probe_runs(base, ARMS, first, out, args.probe_tasks)
    interim = interim_look(base, ARMS, first, out)
    kept = [BASELINE, *(arm for arm in ARMS[1:] if not interim["arms"][arm]["stopped"])]
    if rest:
        compare(base, kept, rest, out, live=False)
        probe_runs(base, kept, rest, out, args.probe_tasks)
    if args.add_on:
        results = summarise(finished_runs(base, ARMS, seeds, out)[0])
        won = results["paired"].get(f"orsd:expert - {BASELINE}", {}).get(f"final_{PRIMARY}_diff", {})
        if not won.get("low", -1.0) > 0:
            raise UsageError("the add-on arms run only where orsd:expert beats grpo (its interval above 0)")
        compare(base, [BASELINE, *ADD_ON_ARMS], seeds, out, live=False)
        probe_runs(base, ADD_ON_ARMS, seeds, out, args.probe_tasks)


def _record_invocation(
    out: Path, commit: str, args: argparse.Namespace, overrides: list[str], record: dict, wall: float
) -> None:
    """study.json: every invocation (stage, commit, command, wall time) and the latest state."""
    path = out / "study.json"
    study = json.loads(path.read_text()) if path.is_file() else {"invocations": []}
    study["invocations"].append(
        {"stage": args.stage, "commit": commit, "command": " ".join(sys.argv), "wall_seconds": wall}
    )
    study.update({"arms": ARMS, "add_on_arms": ADD_ON_ARMS, "seeds": args.seeds, "overrides": overrides, **record})
    out.mkdir(parents=True, exist_ok=True)
    write_study_record(out, study)


if __name__ == "__main__":
    sys.exit(run_reporting_errors("orsd_study_v3.py", main, "run the same command again to continue"))
