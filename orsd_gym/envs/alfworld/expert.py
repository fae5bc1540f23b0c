"""Playing tasks with the planner's expert actions (smoke runs, benchmarks, behaviour cloning)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import gymnasium as gym


@dataclass
class ExpertEpisode:
    """One task played by following ``info["expert_actions"][0]`` every step."""

    task_id: int
    task_type: str
    goal: str
    steps: int
    won: bool
    seconds: float
    actions: list[str]


def play_expert(env: gym.Env, task_id: int, *, max_steps: int = 50) -> ExpertEpisode:
    """Play task ``task_id`` of an ALFWorld env made with ``expert=True``."""
    start = time.perf_counter()
    _, info = env.reset(options={"task_id": task_id})
    if "expert_actions" not in info:
        raise ValueError("play_expert needs an ALFWorld env made with expert=True")
    actions: list[str] = []
    terminated = truncated = False
    while not (terminated or truncated) and len(actions) < max_steps and info["expert_actions"]:
        action = info["expert_actions"][0]
        actions.append(action)
        _, _, terminated, truncated, info = env.step(action)
    return ExpertEpisode(
        task_id, info["task_type"], info["task"], len(actions), bool(info["won"]), time.perf_counter() - start, actions
    )
