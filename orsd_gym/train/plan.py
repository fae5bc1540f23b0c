"""The task plan: which tasks a run trains on, evaluates on and clones demonstrations from.

Evaluation is held out by construction. The env says which constructor arguments select its
training tasks and which its held-out ones (`TextEnv.task_splits`: official train vs valid
games, WebShop's train vs test goals, generated ALFWorld tasks in disjoint floor plans,
GuessNumber's held-out numbers). An env that declares no partition gets one from the plan:
every fifth task id is held out, and the plan carries a warning that says so. Every task is
named by a key (env id + `TextEnv.task_key`: a game file, a goal index, a generator stream and
index), and the plan refuses to evaluate on a key of the training side unless the config asks
for evaluation on training tasks (``eval.tasks: training``).

The warm start's demonstrations are played on training-side tasks, and RL training then draws
from the others (``warm_start.disjoint_from_training``), so a run's training success is never
measured in rooms its policy was cloned in.

Everything is a pure function of the config: training tasks of iteration ``i`` come from
``(train.seed, i)`` alone, so every algorithm run with one seed sees the same tasks; the
evaluation tasks come from ``eval.seed_base`` alone, so every run is evaluated on the same ones.
The trainer runs exactly the plan that `build_task_plan` returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from orsd_gym import configio
from orsd_gym.envs.base import TextEnv
from orsd_gym.envs.registry import text_env_class
from orsd_gym.envs.tasks import TaskSpec
from orsd_gym.errors import OrsdGymError, TaskPlanError
from orsd_gym.train.config import Config
from orsd_gym.train.seeds import TASKS, iteration_rng

#: Without a declared partition, task ids ``i`` with ``i % FALLBACK_HOLD_OUT_EVERY == FALLBACK_HOLD_OUT_EVERY - 1``
#: are held out (one task in five).
FALLBACK_HOLD_OUT_EVERY = 5
# Stream tags of the plan's draws outside the per-iteration streams of `orsd_gym.train.seeds`.
_WARM_START, _EVAL = 0xBC, 0xE7


@dataclass(frozen=True)
class PlannedTask:
    """One task of the plan: which task of its side's env, the reset seed, and its key."""

    task_id: int
    seed: int
    key: str

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec(seed=self.seed, task_id=self.task_id)


@dataclass
class TaskPlan:
    """What a run plays; see the module docstring."""

    env_id: str
    #: Constructor arguments of the training side and of the evaluation side.
    train_kwargs: dict[str, Any]
    eval_kwargs: dict[str, Any]
    #: How training and evaluation tasks are told apart (for reports).
    partition: str
    #: "held_out" or "training" (``eval.tasks``).
    eval_on: str
    train: list[list[PlannedTask]]
    eval: list[PlannedTask]
    warm_start: list[PlannedTask]
    #: Sizes of the pools RL training draws from (the training side less the warm start's
    #: demonstration tasks, by default) and evaluation draws from.
    train_pool: int
    eval_pool: int
    #: Evaluation keys that are also training-side keys (empty unless ``eval_on == "training"``).
    overlap: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def keys(self) -> dict[str, list[str]]:
        """``{"train", "eval", "warm_start"}`` -> task keys, training tasks in iteration order."""
        return {
            "train": [task.key for tasks in self.train for task in tasks],
            "eval": [task.key for task in self.eval],
            "warm_start": [task.key for task in self.warm_start],
        }

    def summary(self) -> dict[str, Any]:
        """What a report states about the plan (JSON-safe)."""
        keys = self.keys()
        return {
            "env_id": self.env_id,
            "partition": self.partition,
            "eval_on": self.eval_on,
            "train_kwargs": self.train_kwargs,
            "eval_kwargs": self.eval_kwargs,
            "train_pool": self.train_pool,
            "eval_pool": self.eval_pool,
            "train_distinct": len(set(keys["train"])),
            "eval_tasks": len(keys["eval"]),
            "eval_distinct": len(set(keys["eval"])),
            "warm_start_distinct": len(set(keys["warm_start"])),
            "warm_start_train_overlap": len(set(keys["warm_start"]) & set(keys["train"])),
            "eval_train_overlap": len(self.overlap),
            "warnings": list(self.warnings),
        }


def task_plan(config: Config, iterations: int | None = None) -> dict[str, list[str]]:
    """The task keys a run of ``config`` trains on (``iterations``, default ``train.iterations``),
    evaluates on and clones from: ``{"train": [...], "eval": [...], "warm_start": [...]}``."""
    return build_task_plan(config, iterations).keys()


def build_task_plan(config: Config, iterations: int | None = None) -> TaskPlan:
    """The full plan of a run (see the module docstring); fails with `TaskPlanError` before
    anything is trained when evaluation would overlap training or has too few tasks."""
    iterations = config.train.iterations if iterations is None else iterations
    env_id, base = config.env.id, dict(config.env.kwargs)
    env_class = text_env_class(env_id)
    try:
        splits = env_class.task_splits(base) if env_class is not None else None
    except (OrsdGymError, ValueError) as error:
        raise TaskPlanError(f"env.kwargs: {error}") from error
    warnings: list[str] = []
    train_kwargs = configio.merge(base, splits.train) if splits else base
    if config.eval.tasks == "training":
        eval_kwargs = configio.merge(train_kwargs, config.eval.env_kwargs)
        partition = "none: evaluation on training tasks (eval.tasks=training)"
        warnings.append("evaluation runs on training tasks (eval.tasks=training): its success is not held out")
    elif splits:
        eval_kwargs = configio.merge(base, splits.held_out, config.eval.env_kwargs)
        partition = splits.description
    else:
        eval_kwargs = configio.merge(base, config.eval.env_kwargs)
        partition = (
            f"task ids i with i % {FALLBACK_HOLD_OUT_EVERY} == {FALLBACK_HOLD_OUT_EVERY - 1} held out by the trainer"
        )
        warnings.append(
            f"{env_id} declares no training/held-out partition (TextEnv.task_splits); the trainer held out one "
            f"task id in {FALLBACK_HOLD_OUT_EVERY}, which is only as sound as the env's task ids are distinct tasks"
        )

    with _made(env_id, train_kwargs) as train_env:
        warnings += [w for w in [train_env.data_warning()] if w]
        train_ids = list(range(len(train_env.tasks)))
        if splits is None and config.eval.tasks == "held_out":
            train_ids = [i for i in train_ids if not _fallback_held_out(i)]
        train_keys = {i: f"{env_id}:{train_env.task_key(i)}" for i in train_ids}
    with _made(env_id, eval_kwargs) as eval_env:
        if config.eval.tasks == "training":
            eval_ids = list(train_ids)
        elif splits is None:
            eval_ids = [i for i in range(len(eval_env.tasks)) if _fallback_held_out(i)]
        else:
            eval_ids = list(range(len(eval_env.tasks)))
        eval_keys = {i: f"{env_id}:{eval_env.task_key(i)}" for i in eval_ids}
    if not train_ids:
        raise TaskPlanError(f"env {env_id} with {train_kwargs} has no training tasks")

    warm_start = _warm_start_tasks(config, train_ids, train_keys)
    rl_ids = _rl_training_ids(config, train_ids, warm_start)
    plan = TaskPlan(
        env_id=env_id,
        train_kwargs=train_kwargs,
        eval_kwargs=eval_kwargs,
        partition=partition,
        eval_on=config.eval.tasks,
        train=[_training_tasks(config, i, rl_ids, train_keys) for i in range(iterations)],
        eval=_eval_tasks(config, eval_ids, eval_keys),
        warm_start=warm_start,
        train_pool=len(rl_ids),
        eval_pool=len(eval_ids),
        warnings=warnings,
    )
    training_side = set(train_keys.values())
    plan.overlap = sorted({task.key for task in plan.eval} & training_side)
    if plan.overlap and config.eval.tasks == "held_out":
        raise TaskPlanError(
            f"{len(plan.overlap)} evaluation task(s) are also training tasks (e.g. {plan.overlap[0]}); "
            "evaluation must be held out: check eval.env_kwargs, or set eval.tasks=training to "
            "evaluate on training tasks deliberately"
        )
    return plan


def _fallback_held_out(task_id: int) -> bool:
    return task_id % FALLBACK_HOLD_OUT_EVERY == FALLBACK_HOLD_OUT_EVERY - 1


@contextlib.contextmanager
def _made(env_id: str, kwargs: dict[str, Any]) -> Iterator[TextEnv]:
    """An env instance to read the task list and keys from (closed afterwards)."""
    try:
        env = gym.make(env_id, **kwargs)
    except (OrsdGymError, ValueError, TypeError, FileNotFoundError) as error:
        raise TaskPlanError(f"env.kwargs: cannot make {env_id} with {kwargs}: {error}") from error
    try:
        text_env = env.unwrapped
        if not isinstance(text_env, TextEnv):
            raise TaskPlanError(f"{env_id} is not an orsd_gym TextEnv, so its tasks cannot be listed; subclass TextEnv")
        yield text_env
    finally:
        env.close()


def _draw(rng: np.random.Generator, pool: list[int], n: int) -> list[int]:
    """``n`` ids of ``pool`` in random order, every id once before any repeats."""
    order: list[int] = []
    while len(order) < n:
        order.extend(int(i) for i in rng.permutation(len(pool)))
    return [pool[i] for i in order[:n]]


def _seeds(rng: np.random.Generator, n: int) -> list[int]:
    return [int(s) for s in rng.integers(0, 2**31 - 1, size=n)]


def _training_tasks(config: Config, iteration: int, ids: list[int], keys: dict[int, str]) -> list[PlannedTask]:
    rng = iteration_rng(config.train.seed, iteration, TASKS)
    chosen = _draw(rng, ids, config.rollout.tasks_per_iteration)
    return [PlannedTask(i, seed, keys[i]) for i, seed in zip(chosen, _seeds(rng, len(chosen)), strict=True)]


def _rl_training_ids(config: Config, ids: list[int], warm_start: list[PlannedTask]) -> list[int]:
    """The training side's task ids RL draws from: all of them, less the warm start's
    demonstration tasks unless ``warm_start.disjoint_from_training`` is off."""
    if not config.warm_start.disjoint_from_training:
        return ids
    cloned = {task.task_id for task in warm_start}
    remaining = [i for i in ids if i not in cloned]
    if not remaining:
        raise TaskPlanError(
            f"the warm start's {config.warm_start.episodes} demonstrations use all {len(ids)} training task(s), "
            "leaving none for RL: lower warm_start.episodes, or let them share tasks with "
            "warm_start.disjoint_from_training=false"
        )
    return remaining


def _warm_start_tasks(config: Config, ids: list[int], keys: dict[int, str]) -> list[PlannedTask]:
    seed = config.warm_start.demonstration_seed(config.train.seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, _WARM_START]))
    chosen = _draw(rng, ids, config.warm_start.episodes)
    return [PlannedTask(i, seed, keys[i]) for i, seed in zip(chosen, _seeds(rng, len(chosen)), strict=True)]


def _eval_tasks(config: Config, ids: list[int], keys: dict[int, str]) -> list[PlannedTask]:
    n, skip = config.eval.num_tasks, config.eval.skip_tasks
    if skip + n > len(ids) and not config.eval.allow_repeats:
        skipped = f" after the {skip} skipped (eval.skip_tasks)" if skip else ""
        raise TaskPlanError(
            f"eval.num_tasks={n}{skipped} but the evaluation side has only {len(ids)} distinct task(s); "
            "lower eval.num_tasks or set eval.allow_repeats=true"
        )
    if not ids and n:
        raise TaskPlanError("the evaluation side has no tasks")
    # Independent of train.seed: every run of every algorithm is evaluated on the same tasks.
    # One order, whatever the skip: a run that skips N plays what follows another's first N.
    rng = np.random.default_rng(np.random.SeedSequence([config.eval.seed_base, _EVAL]))
    chosen = _draw(rng, ids, skip + n)
    return [PlannedTask(i, config.eval.seed_base + k, keys[i]) for k, i in enumerate(chosen) if k >= skip]
