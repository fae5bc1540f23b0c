"""How a task is named to an env: a reset seed, or a task id of its task list with a seed.

Shared by everything that plays tasks (the LLM collector, the classic-RL wrappers and
baselines, the task plan), so none of them depends on another to say which task it means.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TaskSpec:
    """A task named explicitly: ``task_id`` of the env's task list, reset with ``seed``."""

    seed: int
    task_id: int | None = None


def as_task_spec(task: int | TaskSpec | dict[str, Any]) -> TaskSpec:
    """A task as a `TaskSpec`: an int is a reset seed (the env picks the task from it)."""
    if isinstance(task, TaskSpec):
        return task
    if isinstance(task, dict):
        return TaskSpec(**task)
    if isinstance(task, (int, np.integer)) and not isinstance(task, bool):
        return TaskSpec(seed=int(task))
    raise TypeError(f"a task is an int seed or a TaskSpec(seed, task_id), got {task!r}")
