"""What ORSD works out for each group of attempts, and what every step reads of a trajectory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from orsd_gym.envs.base import EXPERT_ACTIONS
from orsd_gym.rollout.trajectory import Trajectory


@dataclass
class GroupWork:
    """What ORSD works out for one group of attempts."""

    group_id: int
    #: Every trajectory of the group (all per-step samples), and one representative per attempt.
    indices: list[int]
    attempts: list[int]
    task: str
    task_key: str
    rewards: list[float]
    bundles: list[list[str]]
    #: Where the bundles came from, and for a shuffled one the task it was written for.
    source: str = "policy"
    lent_from: str | None = None
    malformed: int = 0
    #: Raw text of the dropped bundles (shortened), to see why parsing failed.
    malformed_texts: list[str] = field(default_factory=list)
    scores: list[list[float]] | None = None
    correlations: list[float | None] | None = None
    selected: int | None = None
    reason: str = ""


def task_key(trajectory: Trajectory) -> str:
    """The task's key as the env names it (`TextEnv.task_key`, in the reset info), the same key a
    run's task plan and a rubric file use."""
    return str(trajectory.infos[0].get("task_key") or f"{trajectory.env_id}#{trajectory.task_id}")


def knows_expert_actions(trajectory: Trajectory) -> bool:
    """Whether the env reported its expert's next action at each step (``expert=True``)."""
    return len(trajectory.infos) > 1 and EXPERT_ACTIONS in trajectory.infos[1]


def masked_deltas(deltas: list[torch.Tensor], trajs: list[Trajectory], indices: Sequence[int]) -> torch.Tensor:
    parts = [deltas[i][torch.as_tensor(trajs[i].loss_mask, dtype=torch.bool)] for i in indices]
    return torch.cat(parts) if parts else torch.zeros(0)
