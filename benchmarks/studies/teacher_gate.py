"""The teacher test as a gate: does the policy play better with the expert's rubric in its
context than with none, and than with another task's rubric? Measured before any ORSD study,
on the study's rooms and held-out tasks, for each starting policy a study could use.

A cell is one warm start (a setting and the seed that trained it) with the rubric in one
placement, evaluated on the first N held-out tasks (greedy decoding, so each task is one win or
loss per arm). It passes when, paired over its *fresh* tasks, the expert rubric beats both no
rubric and another task's rubric with 95% intervals above 0. ORSD distils the policy with the
rubric into the policy without it: where the teacher is no better, a study cannot show ORSD
moving behaviour, at any beta.

**A gate is a property of a warm start.** A study trains one warm start per seed (`compare`),
so the gate runs on each of the study's seeds (``--seeds``; a study whose seeds share one warm
start, ``warm_start.path``, gates that one: ``--seeds`` the seed that trains it).

**Selection tasks and fresh tasks.** Choosing a setting because its cells did well on some
tasks selects on those tasks: there a chosen cell reads high by chance too. Every cell records
the command that ran it (the same command run again, to continue, counts as one); its
selection tasks are the held-out tasks that cells of earlier commands played (whatever their
setting or seed), its fresh tasks the others, and the gate's verdict is on the fresh ones.
The held-out tasks of every cell are a prefix of one seeded order (`orsd_gym.train.plan`), so
a larger cell holds a smaller one's tasks: screen on 24, then confirm the chosen setting on 96
for every seed in one command, and each seed's verdict is on the 72 tasks the screen never
played.

Settings (SmolLM2-135M-Instruct, the study's generated ALFWorld rooms):

* ``zero-shot``: the model as shipped;
* ``plain-N``: cloned on N expert demonstrations (the first study's warm start is plain-12);
* ``rubric-N``: cloned on the same N demonstrations, half of them with their task's expert
  rubric in context (``probes.rubric_demonstrations.share=0.5``) in the placement under test, so the
  policy can learn that a rubric tells it what to do; plain-N is its control.

    python benchmarks/studies/teacher_gate.py --settings zero-shot,plain-12,plain-48,rubric-48 --seeds 0 \\
        --out benchmarks/results/teacher_gate                        # screen: 24 held-out tasks
    python benchmarks/studies/teacher_gate.py --settings rubric-48 --placements system --eval-tasks 96 \\
        --seeds 0,1,2 --out benchmarks/results/teacher_gate          # confirm every seed's warm start
    python benchmarks/studies/teacher_gate.py --report-only --seeds 0,1,2 --out benchmarks/results/teacher_gate

Another study gates its warm starts through `run_gate` with its own `orsd_study.Design` (the
preset and settings its runs use) and, where every arm trains from one file, that file as the
cells' warm start: study v3 does (``orsd_study_v3.py gate``).

Writes ``gate.json`` (every cell: its per-task outcomes, rubrics, seed, commit and command;
every command; and the report) after each cell, and skips the cells it already holds, so an
interrupted gate continues; and ``gate.md``, the report: the cells tried, each cell's
selection tasks, its result on its fresh tasks, and which of the study's warm starts pass.
``--report-only`` runs no cell: it writes the report of the cells ``gate.json`` holds.
Trailing ``KEY=VALUE`` overrides apply to every cell (after the gate's own).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orsd_study import EVAL_TASKS, V2, Design, head_commit

from orsd_gym import configio
from orsd_gym.cli import run_reporting_errors
from orsd_gym.probes import probes_for
from orsd_gym.probes.teacher import paired_gain
from orsd_gym.train.config import Config
from orsd_gym.train.trainer import Trainer

PLACEMENTS = ("system", "user")
#: The seeds of `orsd_study.py` (its ``--seeds 3``): each trains its own warm start.
STUDY_SEEDS = "0,1,2"


@dataclass(frozen=True)
class Cell:
    """One gate cell: the warm start of ``setting`` trained with ``seed``, the rubric in
    ``placement``, on the first ``tasks`` held-out tasks."""

    setting: str
    placement: str
    tasks: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.setting}@{self.tasks}/{self.placement}/seed{self.seed}"


def recorded_cell(name: str, record: Mapping[str, Any]) -> Cell:
    """The cell a record of ``gate.json`` holds. The gate's first records (before seeds were
    gated) carry only their name, ``setting[@tasks]/placement``, and were all of seed 0."""
    if "seed" in record:
        return Cell(record["setting"], record["placement"], record["tasks"], record["seed"])
    setting, placement = name.split("/")
    return Cell(setting.partition("@")[0], placement, len(record["success"]["none"]), 0)


def run_of(record: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> int:
    """Index in ``gate.json``'s ``runs`` of the command that ran a cell (the first records name
    it by its commit only)."""
    if "run" in record:
        return record["run"]
    return next(n for n, run in enumerate(runs) if run["commit"] == record["commit"])


def run_index(gate: dict, command: str, commit: str) -> int:
    """This command's index in ``gate["runs"]``: a command run again continues its first run
    (an interrupted gate; its cells were chosen together), any other is a new run."""
    for n, run in enumerate(gate["runs"]):
        if run["command"] == command:
            run.setdefault("continued", []).append({"commit": commit, "started": time.strftime("%F %T")})
            return n
    gate["runs"].append({"commit": commit, "command": command, "started": time.strftime("%F %T")})
    return len(gate["runs"]) - 1


def setting_overrides(cell: Cell, runs: Path, design: Design = V2, warm_start: Path | None = None) -> list[str]:
    """The config of one gate cell: the study's tasks, evaluation only (no RL iteration).
    ``warm_start``: where the cell's warm start is kept (default: cached under ``runs``, one per
    setting, placement and seed), e.g. the file a study then trains every arm from."""
    kind, _, size = cell.setting.partition("-")
    overrides = [
        *design.study,
        f"eval.num_tasks={cell.tasks}",
        "eval.skip_tasks=0",  # the first tasks of the held-out order: a study evaluates on the ones after
        "algo.name=grpo",
        "train.iterations=0",
        f"train.seed={cell.seed}",  # the warm start's demonstrations and their order
        "eval.env_kwargs={expert: reset}",  # the expert rubric is the planner's plan at reset
        "probes.teacher.test=expert",
        f"probes.teacher.placement={cell.placement}",
        "probes.teacher.max_criteria=3",  # the study's ORSD arms' max_criteria
        "logging.live=false",
        f"train.output_dir={runs / cell.name.replace('/', '-')}",
    ]
    if kind == "zero":
        return [*overrides, "warm_start.episodes=0"]
    if kind not in ("plain", "rubric") or not size.isdigit():
        raise SystemExit(f"unknown setting {cell.setting!r}: use zero-shot, plain-N or rubric-N")
    share = 0.5 if kind == "rubric" else 0.0
    # A plain warm start does not depend on the placement: both placements test one policy.
    cache = f"{cell.setting}-{cell.placement}" if kind == "rubric" else cell.setting
    return [
        *overrides,
        f"warm_start.episodes={size}",
        f"probes.rubric_demonstrations.share={share}",
        f"probes.rubric_demonstrations.placement={cell.placement}",
        "probes.rubric_demonstrations.max_criteria=3",
        f"warm_start.path={warm_start or runs / 'warm_start' / f'{cache}-seed{cell.seed}.safetensors'}",
    ]


def gate_cell(overrides: list[str], preset: str = V2.preset) -> dict:
    """Run the cell's evaluation and teacher test; its ``teacher/*`` numbers and per-task record."""
    config = configio.load(Config, preset, overrides)
    summary = Trainer(config, overwrite=True, live=False, callbacks=probes_for(config)).run()
    record = json.loads((summary.output_dir / "teacher.jsonl").read_text().splitlines()[-1])
    metrics = {k: v for k, v in (summary.final_eval or {}).items() if k.startswith("teacher/")}
    return {"metrics": metrics, "success": record["success"], "rubrics": record["rubrics"]}


def selection_tasks(gate: Mapping[str, Any], name: str) -> set[str]:
    """The held-out tasks that cells of commands before the one that ran cell ``name`` played."""
    ran_by = run_of(gate["cells"][name], gate["runs"])
    return {
        task
        for record in gate["cells"].values()
        if run_of(record, gate["runs"]) < ran_by
        for task in record["success"]["none"]
    }


def fresh_result(record: Mapping[str, Any], selected: set[str]) -> dict:
    """The cell's teacher test on its tasks with a rubric outside ``selected``, and its verdict."""
    fresh = sorted(set(record["rubrics"]) - selected)
    arms = record["success"]
    result: dict[str, Any] = {
        "fresh_tasks": len(fresh),
        "success": {arm: _mean(arms[arm], fresh) for arm in ("none", "own", "other")},
        "gain": paired_gain(arms["own"], arms["none"], fresh),
        "gain_vs_other": paired_gain(arms["own"], arms["other"], fresh),
        "won": sum(arms["own"][k] > arms["none"][k] for k in fresh),
        "lost": sum(arms["own"][k] < arms["none"][k] for k in fresh),
    }
    if len(fresh) < 2:
        result["verdict"] = "no fresh tasks"  # an interval needs two
    else:
        passed = result["gain"]["low"] > 0 and result["gain_vs_other"]["low"] > 0
        result["verdict"] = "pass" if passed else "fail"
    return result


def _mean(values: Mapping[str, float], keys: Sequence[str]) -> float:
    return sum(values[k] for k in keys) / len(keys) if keys else float("nan")


def gate_report(gate: Mapping[str, Any], seeds: Sequence[int]) -> dict:
    """Every cell's selection tasks and fresh result, and the verdict on each of the study's
    warm starts for every setting and placement that passed somewhere."""
    cells: dict[str, Any] = {}
    for name, record in gate["cells"].items():
        cell = recorded_cell(name, record)
        selected = selection_tasks(gate, name)
        cells[name] = {
            **vars(cell),
            "run": run_of(record, gate["runs"]),
            "selection_tasks": sorted(selected & set(record["success"]["none"])),
            **fresh_result(record, selected),
        }
    return {
        "cells_tried": len(cells),
        "study_seeds": list(seeds),
        "cells": cells,
        "warm_starts": warm_starts(cells, seeds),
    }


def warm_starts(cells: Mapping[str, Mapping[str, Any]], seeds: Sequence[int]) -> dict:
    """For each setting/placement with a passing cell: each study seed's verdict, on its largest
    cell with fresh tasks (else its largest cell), or "not gated"."""
    chosen = sorted({f"{c['setting']}/{c['placement']}" for c in cells.values() if c["verdict"] == "pass"})
    verdicts: dict[str, dict[str, str]] = {}
    for choice in chosen:
        verdicts[choice] = {}
        for seed in seeds:
            tried = [n for n, c in cells.items() if f"{c['setting']}/{c['placement']}" == choice and c["seed"] == seed]
            best = max(tried, key=lambda n: (cells[n]["fresh_tasks"] >= 2, cells[n]["tasks"]), default=None)
            verdicts[choice][str(seed)] = f"{cells[best]['verdict']} ({best})" if best else "not gated"
    return verdicts


def markdown(gate: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    """``gate.md``: the cells tried, the table on fresh tasks, selection tasks, warm starts."""
    commands = gate["runs"]
    lines = [
        "# Teacher gate",
        "",
        f"{report['cells_tried']} cells tried in {len(commands)} command{'s' * (len(commands) != 1)} "
        "(`gate.json` holds every cell's per-task outcomes per arm, its rubrics, commit and command):",
        "",
        *[_command_line(n, command, report["cells"]) for n, command in enumerate(commands)],
        "",
        "A cell's selection tasks are the held-out tasks cells of earlier commands played (a setting "
        "chosen for how it did there reads high there by chance too); its fresh tasks are the others, "
        "and the gate's verdict is on them: the expert's rubric must beat none and another task's "
        "with 95% intervals above 0. Success rates and gains below are on the fresh tasks (t intervals "
        "over tasks, from the per-task records).",
        "",
        "| cell (setting @ tasks / placement) | warm start's seed | fresh tasks | none | expert | other task's "
        "| expert - none [95% CI] | expert - other [95% CI] | won / lost vs none | gate |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *[_table_row(name, cell) for name, cell in report["cells"].items()],
        "",
        *_selection_lines(gate, report),
        *_warm_start_lines(report),
    ]
    return "\n".join(lines) + "\n"


def _command_line(n: int, command: Mapping[str, Any], cells: Mapping[str, Mapping[str, Any]]) -> str:
    continued = len(command.get("continued", []))
    again = f" (run again {continued} time{'s' * (continued != 1)} to continue)" if continued else ""
    count = sum(cell["run"] == n for cell in cells.values())
    return f"{n + 1}. `{command['command']}` at {command['commit'][:7]}, {command['started']}{again}: {count} cells"


def _table_row(name: str, cell: Mapping[str, Any]) -> str:
    rates = " | ".join(f"{cell['success'][arm]:.3f}" for arm in ("none", "own", "other"))
    return (
        f"| {name} | {cell['seed']} | {cell['fresh_tasks']} of {cell['tasks']} | {rates} "
        f"| {_interval(cell['gain'])} | {_interval(cell['gain_vs_other'])} | {cell['won']} / {cell['lost']} "
        f"| {cell['verdict']} |"
    )


def _interval(gain: Mapping[str, float]) -> str:
    return _span(gain["mean"], gain["low"], gain["high"]) if gain["n"] >= 2 else "-"


def _recorded(metrics: Mapping[str, float], key: str) -> str:
    return _span(metrics[key], metrics[f"{key}_low"], metrics[f"{key}_high"])


def _span(mean: float, low: float, high: float) -> str:
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def _selection_lines(gate: Mapping[str, Any], report: Mapping[str, Any]) -> list[str]:
    """What each cell with selection tasks reads on all its tasks, as recorded."""
    lines = []
    for name, cell in report["cells"].items():
        if not cell["selection_tasks"]:
            continue
        metrics = gate["cells"][name]["metrics"]
        lines.append(
            f"- `{name}` was selected on {len(cell['selection_tasks'])} of its {cell['tasks']} tasks (played by "
            f"commands before its own; listed in `gate.json`, `report.cells`). On all {cell['tasks']}, as its run "
            f"recorded them (with the interval of its commit's code): expert - none "
            f"{_recorded(metrics, 'teacher/gain')}, expert - other {_recorded(metrics, 'teacher/gain_vs_other')}."
        )
    return [*lines, ""] if lines else []


def _warm_start_lines(report: Mapping[str, Any]) -> list[str]:
    seeds = ", ".join(map(str, report["study_seeds"]))
    if not report["warm_starts"]:
        return [f"No cell passes: no warm start of seeds {seeds} is gated."]
    lines = [
        f"The study's warm starts (seeds {seeds}; one per seed): a setting is gated for the study "
        "when every seed's warm start passes.",
        "",
    ]
    for choice, verdicts in report["warm_starts"].items():
        lines.append(f"- {choice}: " + "; ".join(f"seed {seed} {v}" for seed, v in verdicts.items()))
    return lines


def write_report(gate: dict, out: Path, seeds: Sequence[int]) -> None:
    gate["report"] = gate_report(gate, seeds)
    (out / "gate.json").write_text(json.dumps(gate, indent=1))
    (out / "gate.md").write_text(markdown(gate, gate["report"]))


def requested_cells(settings: str, placements: str, tasks: int, seeds: Sequence[int]) -> list[Cell]:
    return [
        Cell(setting, placement, tasks, seed)
        for seed in seeds
        for setting in settings.split(",")
        for placement in placements.split(",")
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="zero-shot,plain-12,plain-48,rubric-48")
    parser.add_argument("--placements", default=",".join(PLACEMENTS))
    parser.add_argument("--seeds", default=STUDY_SEEDS, help="the study's seeds: each one's warm start is gated")
    parser.add_argument("--out", default="benchmarks/results/teacher_gate")
    parser.add_argument("--runs", default="runs/teacher_gate", help="run directories and cached warm starts")
    parser.add_argument(
        "--eval-tasks", type=int, default=EVAL_TASKS, help="held-out tasks per cell (more: narrower intervals)"
    )
    parser.add_argument("--report-only", action="store_true", help="report the cells gate.json holds; run none")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    cells = [] if args.report_only else requested_cells(args.settings, args.placements, args.eval_tasks, seeds)
    run_gate(Path(args.out), cells, seeds, Path(args.runs), args.overrides)
    return 0


def run_gate(
    out: Path,
    cells: Sequence[Cell],
    seeds: Sequence[int],
    runs: Path,
    overrides: Sequence[str] = (),
    *,
    design: Design = V2,
    warm_start: Path | None = None,
) -> dict:
    """Run the ``cells`` ``out/gate.json`` does not hold yet (each recorded as it finishes, with
    this command and commit), then write the report on the study's ``seeds``; returns gate.json's
    content. No cells: the report of those it holds. ``warm_start``: where every cell keeps its
    warm start (see `setting_overrides`)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gate.json"
    gate = json.loads(path.read_text()) if path.is_file() else {"cells": {}, "runs": []}
    done = {recorded_cell(name, record) for name, record in gate["cells"].items()}
    todo = [cell for cell in cells if cell not in done]
    commit = head_commit()
    # A command that runs no cell (all held already, or a report) records nothing.
    run = run_index(gate, " ".join(sys.argv), commit) if cells else -1
    for cell in todo:
        started = time.perf_counter()
        record = gate_cell([*setting_overrides(cell, runs, design, warm_start), *overrides], design.preset)
        gate["cells"][cell.name] = {
            **record,
            **vars(cell),
            "run": run,
            "commit": commit,
            "wall_seconds": time.perf_counter() - started,
        }
        write_report(gate, out, seeds)
        print(_table_row(cell.name, gate["report"]["cells"][cell.name]), flush=True)
    write_report(gate, out, seeds)
    return gate


if __name__ == "__main__":
    sys.exit(
        run_reporting_errors(
            "teacher_gate.py", main, "run the same command again to continue (finished cells are kept)"
        )
    )
