"""From a finished Trajectory to the scalar reward the group-relative advantage is computed on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orsd_gym.envs.base import NO_PROGRESS
from orsd_gym.rollout.trajectory import Trajectory


@dataclass
class RewardConfig:
    """Outcome reward with optional per-action penalties.

    reward = success_reward * success          (outcome="success", the default)
             or the episode's return            (outcome="return": partial credit, e.g. WebShop's score)
             - sum over turns of the turn's penalty, where a turn pays
                 format_penalty          if its action could not be parsed (``format_valid`` False),
                 invalid_action_penalty  if the env rejected it (``is_valid_action`` False),
                 no_progress_penalty     if it repeated the previous action on an unchanged
                                         observation (``no_progress`` True: it changed nothing),
                 the largest of these    if several (one bad turn is penalised once).
    """

    #: "success": success_reward for a won episode, else 0; "return": the episode's return (partial credit, e.g.
    #: WebShop's score).
    outcome: Literal["success", "return"] = "success"
    #: Reward of a won episode with outcome "success".
    success_reward: float = 1.0
    #: Per step whose info says ``is_valid_action`` is False (0 disables).
    invalid_action_penalty: float = 0.0
    #: Per model turn with ``format_valid`` False (0 disables).
    format_penalty: float = 0.0
    #: Per step whose info says ``no_progress``: the previous action again, on an unchanged
    #: observation (0 disables).
    no_progress_penalty: float = 0.0

    def __post_init__(self) -> None:
        if min(self.invalid_action_penalty, self.format_penalty, self.no_progress_penalty) < 0:
            raise ValueError("invalid_action_penalty, format_penalty and no_progress_penalty are magnitudes: >= 0")


def turn_penalties(trajectory: Trajectory, config: RewardConfig) -> list[float]:
    """The penalty of each turn (``infos[0]`` is the reset info; ``infos[k]`` follows turn k)."""
    penalties = []
    for turn, info in enumerate(trajectory.infos[1:]):
        unparsable = turn < len(trajectory.format_valid) and not trajectory.format_valid[turn]
        rejected = info.get("is_valid_action") is False
        repeated = info.get(NO_PROGRESS) is True
        penalties.append(
            max(
                config.format_penalty if unparsable else 0.0,
                config.invalid_action_penalty if rejected else 0.0,
                config.no_progress_penalty if repeated else 0.0,
            )
        )
    return penalties


def trajectory_reward(trajectory: Trajectory, config: RewardConfig) -> float:
    """The scalar reward of one attempt under ``config``."""
    if config.outcome == "return":
        reward = trajectory.episode_return
    else:
        reward = config.success_reward * float(bool(trajectory.success))
    return float(reward - sum(turn_penalties(trajectory, config)))


def turn_rewards(trajectory: Trajectory, config: RewardConfig) -> list[float]:
    """The reward of each turn under ``config``; they sum to `trajectory_reward`.

    A turn gets the outcome where the env paid it, less its own penalty: with outcome "return"
    the env's reward after the turn; with "success", ``success_reward`` on the turn that won
    (the first whose info says ``won``; the last turn of a won episode whose infos never say
    so) and 0 on the others.
    """
    penalties = turn_penalties(trajectory, config)
    if config.outcome == "return":
        outcomes = [float(r) for r in trajectory.rewards]
    else:
        outcomes = [0.0] * len(penalties)
        if trajectory.success and outcomes:
            won = [k for k, info in enumerate(trajectory.infos[1:]) if info.get("won")]
            outcomes[won[0] if won else len(outcomes) - 1] = config.success_reward
    return [outcome - penalty for outcome, penalty in zip(outcomes, penalties, strict=True)]
