"""`make_choice_env`: a registered text env, wrapped for classic RL on a given list of tasks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from orsd_gym.envs.tasks import TaskSpec
from orsd_gym.wrappers import AdmissibleChoice, FillActionTemplates, HistoryObservation, TaskSchedule, TextEncoder
from orsd_gym.wrappers.encoders import make_encoder


def make_choice_env(
    env_id: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    tasks: Sequence[int | TaskSpec] | None = None,
    seed: int = 0,
    shuffle: bool = True,
    max_actions: int = 16,
    encoder: str | TextEncoder = "hashed",
    history: int = 2,
) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)`` wrapped, inside out, in:

    `FillActionTemplates` (e.g. WebShop's search template becomes a search for the task text),
    `HistoryObservation(history)`, when ``tasks`` is given `TaskSchedule(tasks, seed, shuffle)` (so
    bare ``reset()`` calls, a vector env's auto-reset, play exactly those tasks), and outermost
    `AdmissibleChoice(max_actions, encoder)`, so ``env.action_masks()`` is a plain method call.
    A module-level function: ``functools.partial`` of it is a picklable env factory for ``SubprocVecEnv``.
    """
    env = gym.make(env_id, **(env_kwargs or {}))
    env = FillActionTemplates(env)
    env = HistoryObservation(env, history)
    if tasks is not None:
        env = TaskSchedule(env, tasks, seed=seed, shuffle=shuffle)
    return AdmissibleChoice(env, max_actions, make_encoder(encoder), seed=seed)
