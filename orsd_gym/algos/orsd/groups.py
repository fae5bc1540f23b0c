"""What ORSD's steps hand each other about a group of attempts, and what they read of a trajectory.

Each step returns its own small result: the groups of the batch (`Group`), each mixed group's
candidate bundles (`Candidates`, from the rubric source), the verdict on them (`Verdict`, from
the judge), and the two together (`Judged`), which the replay, the shaping and the records read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from orsd_gym.algos.base import Peers
from orsd_gym.envs.base import EXPERT_ACTIONS
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory


@dataclass(frozen=True)
class Group:
    """One group of attempts at a task, as the batch holds it."""

    group_id: int
    #: Every trajectory of the group (all per-step samples), and one representative per attempt.
    indices: list[int]
    attempts: list[int]
    task: str
    task_key: str
    rewards: list[float]

    @property
    def mixed(self) -> bool:
        """Whether its rewards differ: a group whose rewards are all equal gets no rubric (GRPO
        gives it zero advantage and there is nothing to align a rubric with)."""
        return len(self.rewards) >= 2 and len(set(self.rewards)) > 1


@dataclass(frozen=True)
class Candidates:
    """A group's candidate bundles, as its rubric source hands them over."""

    bundles: list[list[str]]
    #: Proposals that did not parse, and their raw text (shortened), to see why.
    malformed: int = 0
    malformed_texts: list[str] = field(default_factory=list)
    #: For a shuffled control's bundle, the task it was written for.
    lent_from: str | None = None
    #: A control's one bundle, applied whatever its alignment (recorded in the audit).
    applied: bool = False
    #: Why there is none, where the source knows.
    reason: str = ""


@dataclass(frozen=True)
class Verdict:
    """The judge's verdict on a group's candidates: per bundle and attempt the verifier's mean
    score, each bundle's correlation with the rewards, and the selected bundle (or why none)."""

    scores: list[list[float]] | None = None
    correlations: list[float | None] | None = None
    selected: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class Judged:
    """What ORSD settled for one group: its candidates and the verdict on them."""

    group: Group
    candidates: Candidates
    verdict: Verdict

    @property
    def rubric(self) -> list[str] | None:
        """The selected bundle, or None."""
        selected = self.verdict.selected
        return self.candidates.bundles[selected] if selected is not None else None

    @classmethod
    def without_signal(cls, group: Group) -> Judged:
        """A group whose rewards are all equal: no candidates, no rubric."""
        return cls(group, Candidates([]), Verdict(reason="all rewards equal"))


@dataclass(frozen=True)
class BatchView:
    """What the rubric steps read of the batch being prepared."""

    trajectories: list[Trajectory]
    #: Every group of the batch, mixed or not.
    groups: list[Group]
    policy: Policy
    peers: Peers
    #: What the rubric source drew before anything else used the batch's generator (`Source.draw`).
    seed: int


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
