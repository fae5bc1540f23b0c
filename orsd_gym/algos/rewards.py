"""From a finished Trajectory to the scalar reward the group-relative advantage is computed on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orsd_gym.rollout.trajectory import Trajectory


@dataclass
class RewardConfig:
    """Outcome reward with optional per-action penalties.

    reward = success_reward * success          (outcome="success", the default)
             or the episode's return            (outcome="return": partial credit, e.g. WebShop's score)
             - invalid_action_penalty * (#steps the env marked ``is_valid_action=False``)
             - format_penalty * (#model turns whose action could not be parsed)
    """

    outcome: Literal["success", "return"] = "success"
    success_reward: float = 1.0
    #: Per step whose info says ``is_valid_action`` is False (0 disables).
    invalid_action_penalty: float = 0.0
    #: Per model turn with ``format_valid`` False (0 disables).
    format_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.invalid_action_penalty < 0 or self.format_penalty < 0:
            raise ValueError("invalid_action_penalty and format_penalty are magnitudes and must be >= 0")


def count_invalid_actions(trajectory: Trajectory) -> int:
    """Steps the env judged invalid (``infos[0]`` is the reset info and is not a step)."""
    return sum(1 for info in trajectory.infos[1:] if info.get("is_valid_action") is False)


def trajectory_reward(trajectory: Trajectory, config: RewardConfig) -> float:
    """The scalar reward of one attempt under ``config``."""
    if config.outcome == "return":
        reward = trajectory.episode_return
    else:
        reward = config.success_reward * float(bool(trajectory.success))
    if config.invalid_action_penalty:
        reward -= config.invalid_action_penalty * count_invalid_actions(trajectory)
    if config.format_penalty:
        reward -= config.format_penalty * sum(1 for ok in trajectory.format_valid if not ok)
    return float(reward)
