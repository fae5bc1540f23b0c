"""`EnvSetup`: where a `orsd_gym.rollout.collect` call plays, and how it is shown and watched.

``collect(env, ...)`` takes a bare env (an env id, a `gymnasium.Env`, a list of envs, a
`VectorEnv` or a `SlotPool`) or an `EnvSetup` around one, for what a bare env leaves to the
defaults: ``gym.make`` keywords, how many envs play side by side and in which process, the
env's presentation and a progress bar.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym

from orsd_gym.envs.presentation import EnvPrompt
from orsd_gym.rollout.envpool import EnvSlots, SlotPool
from orsd_gym.rollout.ray_envs import RayEnvSlots

#: Env slots played side by side when ``num_envs`` is not given (at most one per episode).
DEFAULT_NUM_ENVS = 16

#: Where `collect` makes the envs of an env id: in this process, or in Ray actors
#: (`orsd_gym.rollout.ray_envs`).
EnvBackend = Literal["local", "ray"]

#: What `collect` plays on: an env id (made there), envs of the caller's, or a slot pool.
Envs = str | gym.Env | gym.vector.VectorEnv | list[gym.Env] | SlotPool


@dataclass(frozen=True)
class EnvSetup:
    """An env for `collect` with its settings (a bare env takes every default)."""

    #: An env id (``num_envs`` copies are made with ``kwargs`` and closed by `collect`), a
    #: `gymnasium.Env` (copies are made from its spec), a list of envs, a `VectorEnv` or a
    #: `SlotPool` such as `orsd_gym.rollout.ray_envs.RayEnvSlots` (used as is, one slot per env).
    env: Envs
    #: ``gym.make`` keywords of the envs made from an env id.
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: Env slots played side by side (None: `DEFAULT_NUM_ENVS`); never more than the episodes.
    num_envs: int | None = None
    #: Where envs made from an env id live: this process, or Ray actors.
    backend: EnvBackend = "local"
    #: How the env is presented to the policy (None: the env's own, `orsd_gym.rollout.prompts`).
    prompt: EnvPrompt | None = None
    #: Show a progress bar over the episodes played (progress lines are written either way).
    progress: bool = False

    def __post_init__(self) -> None:
        if self.backend not in ("local", "ray"):
            raise ValueError(f"env_backend={self.backend!r}; choose 'local' or 'ray'")
        if self.num_envs is not None and self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")

    def slots(self, episodes: int) -> SlotPool:
        """The slot pool for ``episodes`` episodes (the caller's own, or one made here)."""
        n = min(self.num_envs or DEFAULT_NUM_ENVS, episodes)
        if isinstance(self.env, SlotPool):
            return self.env
        if self.backend == "ray":
            if not isinstance(self.env, str):
                raise TypeError('env_backend="ray" makes the envs in Ray actors: pass an env id, or a RayEnvSlots')
            return RayEnvSlots(self.env, n, dict(self.kwargs))
        return EnvSlots(self.env, n, dict(self.kwargs))

    def owns(self, slots: SlotPool) -> bool:
        """Whether ``slots`` was made here (`collect` closes it; the caller's own pool stays open)."""
        return slots is not self.env
