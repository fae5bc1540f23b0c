"""Evaluate a choice policy (an SB3 model or the random agent) once on each of a list of tasks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from orsd_gym.envs.tasks import TaskSpec, as_task_spec
from orsd_gym.wrappers import reset_arguments


@dataclass
class EpisodeStats:
    """One evaluation episode."""

    seed: int
    task_id: int
    won: bool
    episode_return: float
    steps: int
    invalid_actions: int
    empty_slots: int


@dataclass
class EvalPoint:
    """Held-out evaluation after ``env_steps`` training steps."""

    env_steps: int
    success_rate: float
    mean_return: float
    mean_steps: float
    episodes: list[EpisodeStats]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def play_episode(
    agent: Any, env: gym.Env, task: TaskSpec, *, takes_action_masks: bool, deterministic: bool = True
) -> EpisodeStats:
    """Play ``task`` to the end with ``agent.predict(observation, deterministic=...)`` on an
    `AdmissibleChoice` env; ``takes_action_masks`` passes ``action_masks=env.action_masks()`` too."""
    observation, info = env.reset(**reset_arguments(task))
    episode_return, steps, invalid, empty = 0.0, 0, 0, 0
    done = False
    while not done:
        extra = {"action_masks": env.get_wrapper_attr("action_masks")()} if takes_action_masks else {}
        action, _ = agent.predict(observation, deterministic=deterministic, **extra)
        observation, reward, terminated, truncated, info = env.step(action)
        episode_return += float(reward)
        steps += 1
        invalid += not info["is_valid_action"]
        empty += info["empty_slot"]
        done = terminated or truncated
    return EpisodeStats(task.seed, int(info["task_id"]), bool(info["won"]), episode_return, steps, invalid, empty)


def evaluate(
    agent: Any,
    env: gym.Env,
    tasks: Sequence[int | TaskSpec],
    *,
    env_steps: int,
    takes_action_masks: bool,
    deterministic: bool = True,
) -> EvalPoint:
    """One episode per task, in order (the agent's deterministic choice unless ``deterministic=False``)."""
    episodes = [
        play_episode(agent, env, as_task_spec(t), takes_action_masks=takes_action_masks, deterministic=deterministic)
        for t in tasks
    ]
    return EvalPoint(
        env_steps=env_steps,
        success_rate=float(np.mean([e.won for e in episodes])),
        mean_return=float(np.mean([e.episode_return for e in episodes])),
        mean_steps=float(np.mean([e.steps for e in episodes])),
        episodes=episodes,
    )
