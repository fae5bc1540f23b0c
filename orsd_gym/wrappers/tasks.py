"""`TaskSchedule`: ``reset()`` plays a given list of tasks in a seeded order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from orsd_gym.envs.tasks import TaskSpec, as_task_spec


def reset_arguments(task: TaskSpec) -> dict[str, Any]:
    """The ``reset`` keyword arguments that start ``task`` on a text env."""
    options = {} if task.task_id is None else {"task_id": task.task_id}
    return {"seed": task.seed, "options": options}


class TaskSchedule(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Make ``reset()`` without a ``task_id`` option play the next task of ``tasks``.

    Vector envs (Gymnasium's and SB3's) reset finished sub-envs with a bare ``reset()``, which on
    a text env would draw a task from the env's RNG. With this wrapper an agent trains on exactly
    ``tasks``: a task is an int reset seed (the env picks the task from it, as in `collect` and
    the trainer) or a `TaskSpec(seed, task_id)`; each is started with ``reset(seed=spec.seed,
    options={"task_id": spec.task_id})``.

    The tasks are played in passes, every task once per pass. With ``shuffle=True`` each pass is a
    fresh permutation drawn from ``(seed, pass number)``; otherwise the list order. ``reset(seed=s)``
    restarts the schedule from its first pass with seed ``s`` (so sub-env ``i`` of a vector env
    seeded with ``s + i`` gets its own order); the task's own seed still goes to the env. A reset
    that names ``options["task_id"]`` bypasses the schedule and does not advance it.
    """

    def __init__(self, env: gym.Env, tasks: Sequence[int | TaskSpec], *, seed: int = 0, shuffle: bool = True) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, tasks=tasks, seed=seed, shuffle=shuffle)
        gym.Wrapper.__init__(self, env)
        self.tasks = tuple(as_task_spec(t) for t in tasks)
        if not self.tasks:
            raise ValueError("TaskSchedule needs at least one task")
        self.shuffle = shuffle
        self._restart(seed)

    def _restart(self, seed: int) -> None:
        self._seed = seed
        self._pass = 0
        self._order: list[int] = []

    def _next_task(self) -> TaskSpec:
        if not self._order:
            indices = np.arange(len(self.tasks))
            if self.shuffle:
                indices = np.random.default_rng([self._seed, self._pass]).permutation(indices)
            self._order = indices.tolist()
            self._pass += 1
        return self.tasks[self._order.pop(0)]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if options and options.get("task_id") is not None:
            return self.env.reset(seed=seed, options=options)
        if seed is not None:
            self._restart(seed)
        arguments = reset_arguments(self._next_task())
        arguments["options"] = {**(options or {}), **arguments["options"]}
        return self.env.reset(**arguments)
