"""Classic-RL baselines: MaskablePPO (DRRN policy) vs uniformly random admissible actions.

Per env, every seed trains MaskablePPO on the training tasks and evaluates it (greedy) on the
held-out tasks; the random baseline plays the same held-out tasks. Both sides come from the
env's own partition (`TextEnv.task_splits`, as a training run's task plan takes them), so no
evaluation task is a training task. Reports held-out success and
score (mean episode return; WebShop's purchase score) as mean and spread over seeds, and the SB3
arm's training throughput in env steps per second.

* ``guess``: GuessNumber, 16 numbers, 4 guesses; trains on the 13 numbers that are not
  multiples of 5, evaluates on 5, 10 and 15.
* ``alfworld``: generated easy rooms (2 receptacles, no distractors, pick_and_place_simple);
  80% of ``--alfworld-tasks`` train (split ``generated``), the rest are held out (split
  ``generated_eval``: floor plans no training task uses).
* ``webshop``: the WebShop small set (1000 products): training on the first N train goals
  (``goal_split="train"``), evaluation on the first M of the benchmark's 500 test goals
  (``goal_split="test"``).
  Data from ``--webshop-data``, ``$WEBSHOP_DATA`` or ../shared/data/webshop; without data it
  falls back to the synthetic catalog and says so.

    python benchmarks/studies/sb3_baselines.py --envs guess,alfworld,webshop --seeds 3 --json sb3.json
    python benchmarks/studies/sb3_baselines.py --smoke          # a tiny run that checks the wiring
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from rich.console import Console
from rich.table import Table

from orsd_gym import configio
from orsd_gym.baselines import BaselineConfig, train_baseline
from orsd_gym.envs.registry import text_env_class
from orsd_gym.rollout import TaskSpec

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class EnvSetup:
    """One env of the benchmark: how it is made and which tasks train and evaluate."""

    name: str
    env_id: str
    env_kwargs: dict[str, Any]
    eval_env_kwargs: dict[str, Any] | None
    train_tasks: list[TaskSpec]
    eval_tasks: list[TaskSpec]
    total_env_steps: int
    max_actions: int
    notes: list[str] = field(default_factory=list)


def _tasks(task_ids: range) -> list[TaskSpec]:
    return [TaskSpec(seed=task_id, task_id=task_id) for task_id in task_ids]


def held_out_setup(
    name: str,
    env_id: str,
    kwargs: dict[str, Any],
    steps: int,
    max_actions: int,
    n_train: int | None = None,
    n_eval: int | None = None,
    notes: tuple[str, ...] = (),
) -> EnvSetup:
    """Training tasks from the env's training side and evaluation tasks from its held-out side
    (`TextEnv.task_splits`, as a training run's task plan takes them): disjoint by construction.
    ``n_train`` / ``n_eval``: the first that many tasks of each side (None: all)."""
    splits = text_env_class(env_id).task_splits(kwargs)
    sides = [configio.merge(kwargs, splits.train), configio.merge(kwargs, splits.held_out)]
    counts = []
    for side, wanted in zip(sides, (n_train, n_eval), strict=True):
        env = gym.make(env_id, **side)
        available = len(env.unwrapped.tasks)
        env.close()
        counts.append(available if wanted is None else min(wanted, available))
    return EnvSetup(
        name,
        env_id,
        sides[0],
        sides[1],
        _tasks(range(counts[0])),
        _tasks(range(counts[1])),
        steps,
        max_actions,
        [*notes, f"held out: {splits.description}"],
    )


def guess_setup(steps: int) -> EnvSetup:
    return held_out_setup("guess", "orsd_gym/GuessNumber-v0", {"high": 16, "max_episode_steps": 4}, steps, 16)


def alfworld_setup(steps: int, num_tasks: int) -> EnvSetup:
    kwargs = {
        "generator": {"num_tasks": num_tasks, "max_receptacles": 2, "num_distractors": 0},
        "task_types": ["pick_and_place_simple"],
    }
    n_train = max(1, int(num_tasks * 0.8))
    return held_out_setup("alfworld", "orsd_gym/ALFWorld-v0", kwargs, steps, 16, n_train, num_tasks - n_train)


def webshop_setup(steps: int, eval_goals: int, train_goals: int, data_dir: str | None) -> EnvSetup:
    data = data_dir or os.environ.get("WEBSHOP_DATA") or str(REPO_ROOT.parent / "shared" / "data" / "webshop")
    notes: tuple[str, ...] = ()
    if not Path(data).is_dir():
        data = None
        notes = ("WebShop data not found: synthetic catalog (not the benchmark's products)",)
    return held_out_setup(
        "webshop", "orsd_gym/WebShop-v0", {"data_dir": data}, steps, 24, train_goals, eval_goals, notes
    )


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def run_env(setup: EnvSetup, seeds: list[int], n_envs: int, eval_every: int, out: Path) -> dict[str, Any]:
    arms: dict[str, list[Any]] = {"maskable_ppo": [], "random": []}
    for seed in seeds:
        for algo, results in arms.items():
            results.append(
                train_baseline(
                    setup.env_id,
                    setup.train_tasks,
                    setup.eval_tasks,
                    BaselineConfig(
                        algo=algo,
                        total_env_steps=setup.total_env_steps,
                        eval_every_steps=eval_every,
                        seed=seed,
                        env_kwargs=setup.env_kwargs,
                        eval_env_kwargs=setup.eval_env_kwargs,
                        max_actions=setup.max_actions,
                        n_envs=n_envs,
                    ),
                    out_dir=out / setup.name / f"{algo}-seed{seed}",
                )
            )
    summary: dict[str, Any] = {
        "env_id": setup.env_id,
        "env_kwargs": setup.env_kwargs,
        "eval_env_kwargs": setup.eval_env_kwargs,
        "notes": setup.notes,
        "train_tasks": len(setup.train_tasks),
        "eval_tasks": len(setup.eval_tasks),
    }
    for algo, results in arms.items():
        summary[algo] = {
            "success": _spread([r.final.success_rate for r in results]),
            "score": _spread([r.final.mean_return for r in results]),
            "per_seed": [
                {
                    "seed": r.seed,
                    "success": r.final.success_rate,
                    "score": r.final.mean_return,
                    "curve": [(p.env_steps, p.success_rate, p.mean_return) for p in r.curve],
                }
                for r in results
            ],
        }
        if algo != "random":
            summary[algo]["train_env_steps"] = results[0].train_env_steps
            summary[algo]["env_steps_per_second"] = _spread([r.env_steps_per_second for r in results])
    return summary


def print_table(summaries: dict[str, Any], seeds: int) -> None:
    table = Table(title=f"MaskablePPO (DRRN, hashed bag of words) vs random, held-out tasks, {seeds} seed(s)")
    for column in ("env", "arm", "success", "score", "train env steps", "env steps/s"):
        table.add_column(column, justify="right")
    for name, summary in summaries.items():
        for algo in ("maskable_ppo", "random"):
            arm = summary[algo]
            success, score = arm["success"], arm["score"]
            table.add_row(
                name,
                algo,
                f"{success['mean']:.3f} ± {success['std']:.3f}",
                f"{score['mean']:.3f} ± {score['std']:.3f}",
                str(arm.get("train_env_steps", "-")),
                f"{arm['env_steps_per_second']['mean']:.0f}" if "env_steps_per_second" in arm else "-",
            )
    Console(width=140).print(table)
    for name, summary in summaries.items():
        for note in summary["notes"]:
            print(f"{name}: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="guess,alfworld,webshop")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="training env steps per run (default: per env)")
    parser.add_argument("--eval-every", type=int, default=5_000)
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--alfworld-tasks", type=int, default=50)
    parser.add_argument("--webshop-eval-goals", type=int, default=100, help="the first N test goals")
    parser.add_argument("--webshop-train-goals", type=int, default=1000)
    parser.add_argument("--webshop-data", default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", default="runs/sb3_baselines")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--smoke", action="store_true", help="tiny budgets: checks the wiring, measures nothing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.smoke:
        args.seeds, args.eval_every, args.n_envs = 1, 128, 2
        args.alfworld_tasks, args.webshop_eval_goals, args.webshop_train_goals = 5, 4, 20

    def steps(default: int) -> int:
        return args.steps or (256 if args.smoke else default)

    builders = {
        "guess": lambda: guess_setup(steps(20_000)),
        "alfworld": lambda: alfworld_setup(steps(20_000), args.alfworld_tasks),
        "webshop": lambda: webshop_setup(
            steps(10_000), args.webshop_eval_goals, args.webshop_train_goals, args.webshop_data
        ),
    }
    names = [n.strip() for n in args.envs.split(",") if n.strip()]
    unknown = sorted(set(names) - set(builders))
    if unknown:
        parser.error(f"unknown env(s) {unknown}; choose from {sorted(builders)}")
    summaries = {}
    for name in names:
        start = time.perf_counter()
        summaries[name] = run_env(
            builders[name](), list(range(args.seeds)), args.n_envs, args.eval_every, Path(args.out)
        )
        summaries[name]["wall_seconds"] = time.perf_counter() - start
    print_table(summaries, args.seeds)
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), "results": summaries}, indent=2))


if __name__ == "__main__":
    main()
