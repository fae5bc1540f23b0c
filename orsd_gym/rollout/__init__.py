"""Multi-turn rollouts over (vector) envs, producing token-level Trajectories.

``from orsd_gym.rollout import collect`` (and its `EnvSetup` and `Teacher`) imports the collector
lazily (it needs gymnasium and the policy interface, not torch).
"""

from __future__ import annotations

from typing import Any

from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.rollout.trajectory import Trajectory, TurnSpan, group_by, load_jsonl, save_jsonl

__all__ = [
    "RolloutOptions",
    "Trajectory",
    "TurnSpan",
    "group_by",
    "load_jsonl",
    "save_jsonl",
    "collect",
    "EnvSetup",
    "Teacher",
    "TaskSpec",
]


def __getattr__(name: str) -> Any:
    if name in ("collect", "EnvSetup", "Teacher"):
        from orsd_gym.rollout import collector

        return getattr(collector, name)
    if name == "TaskSpec":
        from orsd_gym.envs.tasks import TaskSpec

        return TaskSpec
    raise AttributeError(f"module 'orsd_gym.rollout' has no attribute {name!r}")
