"""A classic-RL arm of a comparison (``sb3:maskable_ppo``, ``sb3:ppo``, ``sb3:dqn``, ``random``).

It plays the same task plan as the LLM arms of its seed (the training tasks of every
iteration, the same held-out tasks) under the same environment-step budget, through
`orsd_gym.baselines.train_baseline`, and leaves a run directory the report reads like a
trainer's: ``config.yaml``, ``task_plan.json`` and ``eval.jsonl`` (one record per evaluation,
``iteration`` counting evaluations, ``env_steps`` the training steps before it), plus the
baseline's own ``result.json`` and ``model.zip``. A run directory of the same settings and
budget is reused, wherever the comparison has been moved; any other is replaced (a baseline
trains in minutes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from orsd_gym import configio, jsonio
from orsd_gym.probes import run_records
from orsd_gym.train.config import Config
from orsd_gym.train.plan import build_task_plan
from orsd_gym.train.rundir import config_differences
from orsd_gym.writable import write_file

#: Held-out evaluations over a baseline's training (its curve's points, besides step 0).
EVALUATIONS = 5


def run_baseline(config: Config, algo: str, run_dir: Path, env_steps: int) -> None:
    """Train and evaluate baseline ``algo`` for ``env_steps`` environment steps into ``run_dir``."""
    from orsd_gym.baselines import BaselineConfig, train_baseline  # the sb3 extra, only when a baseline runs

    record = {**run_records(config)[0], "baseline": {"algo": algo, "env_steps": env_steps}}
    saved = run_dir / "config.yaml"
    # Where the comparison lives is no setting: a comparison moved or copied elsewhere keeps its baselines.
    if (
        (run_dir / "eval.jsonl").is_file()
        and saved.is_file()
        and not config_differences(yaml.safe_load(saved.read_text()), record)
    ):
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    plan = build_task_plan(config)
    step_limit = {} if config.env.max_episode_steps is None else {"max_episode_steps": config.env.max_episode_steps}
    result = train_baseline(
        plan.env_id,
        list(dict.fromkeys(task.spec for tasks in plan.train for task in tasks)),
        [task.spec for task in plan.eval],
        BaselineConfig(
            algo=algo,
            total_env_steps=env_steps,
            eval_every_steps=max(1, env_steps // EVALUATIONS),
            seed=config.train.seed,
            env_kwargs=configio.merge(plan.train_kwargs, step_limit),
            eval_env_kwargs=configio.merge(plan.eval_kwargs, step_limit),
        ),
        out_dir=run_dir,
    )
    evaluations = [
        {
            "iteration": index,
            "env_steps": point.env_steps,
            "eval/success_rate": point.success_rate,
            "eval/mean_return": point.mean_return,
        }
        for index, point in enumerate(result.curve)
    ]
    write_file(
        run_dir / "eval.jsonl", "".join(jsonio.dumps(e) + "\n" for e in evaluations), "the baseline's evaluations"
    )
    plan_record = json.dumps({"summary": plan.summary(), "keys": plan.keys()}, indent=1)
    write_file(run_dir / "task_plan.json", plan_record, "the baseline's task plan")
    speed = jsonio.dumps({"baseline/env_steps_per_second": result.env_steps_per_second}) + "\n"
    write_file(run_dir / "metrics.jsonl", speed, "the baseline's metrics")
    write_file(saved, yaml.safe_dump(record, sort_keys=False), "the baseline's settings")
