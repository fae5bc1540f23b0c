"""The text-env contract, checked where any env's output enters a rollout.

A `TextEnv` checks its own engine's output; a plain `gymnasium.Env`, a vector env or an env
in another process is checked here, by the collector, whatever wraps it: a reset or a step
that raised, an observation that is not a string, a reward that is not a finite number or an
info that is not a dict is one `EnvContractError` naming the env, the task and the action,
never a sample played on with a coerced value. (An env in an `AsyncVectorEnv`'s subprocess that
raises is reported as that vector env reports it: which episode it played is not known there.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

from orsd_gym.errors import EnvContractError


class EnvCallFailed(Exception):
    """A slot's env raised in a reset or a step (``error``): the collector names its episode."""

    def __init__(self, slot: int, error: Exception) -> None:
        super().__init__(f"slot {slot}: {type(error).__name__}: {error}")
        self.slot, self.error = slot, error


def broken(env_id: str | None, seed: int, task_id: int | None, action: str | None, what: str) -> EnvContractError:
    """The contract error of one episode's env (``action``: the one it failed after; None: at reset)."""
    step = "at reset" if action is None else f"after action {action[:200]!r}"
    return EnvContractError(f"{env_id or 'the env'} (task seed {seed}, task id {task_id}) {step} {what}")


def contract_problem(observation: Any, info: Any, reward: Any = 0.0) -> str | None:
    """What in an env's reply (a reset's: no reward) breaks the contract; None: nothing."""
    if not isinstance(observation, str):
        return f"returned a {type(observation).__name__} observation; a text env's observations are strings"
    if isinstance(reward, bool) or not isinstance(reward, Real) or not math.isfinite(float(reward)):
        return f"returned the reward {reward!r}; a reward is a finite number"
    if not isinstance(info, Mapping):
        return f"returned a {type(info).__name__} info; an info is a dict"
    return None
