"""Slots of envs the collector plays in parallel: a list of envs, or a Gymnasium vector env.

Each slot is reset individually (its own seed and ``task_id`` option) when an episode starts,
so G attempts at one task and different tasks share one pool. A vector env is reset through
``options["reset_mask"]`` (Gymnasium >= 1.0); its default ``NEXT_STEP`` autoreset is harmless
because a slot is always reset explicitly before its next episode.

`SlotPool` is the interface the collector drives; `EnvSlots` implements it in this process (or
its vector env's subprocesses) and `orsd_gym.rollout.ray_envs.RayEnvSlots` in Ray actors.

Only slots with an episode in progress are stepped. Gymnasium's vector envs step every
sub-env at once, so an idle slot would get a throwaway action (and a finished one an autoreset:
a whole new ALFWorld game); `EnvSlots` steps a `SyncVectorEnv`'s envs one by one and sends an
`AsyncVectorEnv`'s workers their ``step`` commands directly. Any other vector env is stepped
whole, idle slots with an empty action.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from orsd_gym.errors import OrsdGymError
from orsd_gym.profiling import phase
from orsd_gym.rollout.contract import EnvCallFailed

#: A step's (observation, reward, terminated, truncated, info) as the env gave them: the
#: collector checks them (`orsd_gym.rollout.contract`), so nothing here coerces a bad value.
StepResult = tuple[Any, Any, bool, bool, Any]
#: What one slot's reset needs: the reset seed and the reset options (e.g. ``task_id``).
ResetRequest = tuple[int, dict[str, Any]]


@runtime_checkable
class SlotPool(Protocol):
    """``n`` independently resettable env slots, stepped together (what `collect` drives)."""

    n: int
    #: True when a slot's env can be lost and rebuilt while its episode runs (envs held by
    #: other processes that may die); episodes then record `replays`.
    remote: bool

    @property
    def env_id(self) -> str | None: ...

    def reset_many(self, requests: Mapping[int, ResetRequest]) -> dict[int, tuple[str, dict[str, Any]]]:
        """Reset each slot of ``requests`` with its seed and options; its first observation and info."""

    def step(self, actions: Mapping[int, str]) -> dict[int, StepResult]:
        """Step each slot of ``actions``; what its env returned."""

    def replays(self, slot: int) -> int:
        """How many times the slot's current episode was rebuilt on a new env since its reset."""

    def close(self) -> None: ...


def _unbatch_info(infos: dict[str, Any], index: int) -> dict[str, Any]:
    """Env ``index``'s info from a vector env's batched info dict (``key`` + ``_key`` masks)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        present = infos.get(f"_{key}")
        if present is not None and not bool(present[index]):
            continue
        out[key] = _unbatch_info(value, index) if isinstance(value, dict) else value[index]
    return out


def _steps_workers_alone(vector: gym.vector.AsyncVectorEnv) -> bool:
    """Whether `_step_async_workers` is exact for ``vector``.

    A worker in ``NEXT_STEP`` autoreset mode forgets that its episode ended on an explicit
    reset only when it writes to shared memory (Gymnasium 1.x): without shared memory, a slot
    that was not stepped after its episode ended would swallow its next episode's first step.
    """
    return bool(vector.shared_memory) or vector.autoreset_mode == gym.vector.AutoresetMode.DISABLED


def _step_async_workers(vector: gym.vector.AsyncVectorEnv, actions: Mapping[int, str]) -> dict[int, StepResult]:
    """Step only the workers in ``actions``, through the ``("step", action)`` commands that
    `AsyncVectorEnv.step` would send every worker; a worker's error is raised as it would be."""
    pipes = vector.parent_pipes
    for slot, action in actions.items():
        pipes[slot].send(("step", action))
    replies = {slot: pipes[slot].recv() for slot in actions}
    vector._raise_if_errors([replies[slot][1] if slot in replies else True for slot in range(vector.num_envs)])
    results = {}
    for slot, ((observation, reward, terminated, truncated, info), _) in replies.items():
        if vector.shared_memory:  # the worker wrote the observation there, not into its reply
            observation = vector.observations[slot]
        results[slot] = (observation, reward, bool(terminated), bool(truncated), info)
    return results


def _called(slot: int, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` of one slot's env; what it raises (bar the package's own errors, which name
    their task already) as `EnvCallFailed`, so the collector can name the episode."""
    try:
        return call(*args, **kwargs)
    except OrsdGymError:
        raise
    except Exception as error:
        raise EnvCallFailed(slot, error) from error


class EnvSlots:
    """``n`` independently resettable envs stepped together, in this process (a `SlotPool`)."""

    #: Envs in this process (or a vector env's subprocesses) are never lost mid-episode.
    remote = False

    def __init__(
        self,
        env: str | gym.Env | gym.vector.VectorEnv | list[gym.Env],
        n: int,
        env_kwargs: dict[str, Any] | None = None,
    ):
        self._owned: list[Any] = []
        self.vector: gym.vector.VectorEnv | None = None
        self.envs: list[gym.Env] = []
        if env_kwargs and not isinstance(env, str):
            raise ValueError(
                "env_kwargs apply when env is an env id (made here); pass an already made env without them"
            )
        if isinstance(env, (list, tuple)):
            # The caller's own pool (e.g. a trainer's envs kept across iterations): used as is.
            if not env or not all(isinstance(e, gym.Env) for e in env):
                raise TypeError("an env list must be a non-empty list of gymnasium.Env")
            self.envs = list(env)
            self.n = len(self.envs)
        elif isinstance(env, gym.vector.VectorEnv):
            self.vector = env
            self.n = env.num_envs
        elif isinstance(env, str):
            self.envs = [gym.make(env, **(env_kwargs or {})) for _ in range(n)]
            self._owned = list(self.envs)
            self.n = n
        elif isinstance(env, gym.Env):
            # More copies of the caller's env from its spec, so episodes can run side by side.
            extra = [gym.make(env.spec) for _ in range(n - 1)] if env.spec is not None else []
            self.envs = [env, *extra]
            self._owned = extra
            self.n = len(self.envs)
        else:
            raise TypeError(
                f"env must be an env id, a gymnasium.Env, a list of envs or a VectorEnv, got {type(env).__name__}"
            )

    @property
    def env_id(self) -> str | None:
        spec = self.vector.spec if self.vector is not None else self.envs[0].spec
        return None if spec is None else spec.id

    def reset(self, slot: int, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        with phase("env_reset"):
            if self.vector is None:
                return _called(slot, self.envs[slot].reset, seed=seed, options=dict(options))
            mask = np.zeros(self.n, dtype=np.bool_)
            mask[slot] = True
            seeds = [seed if i == slot else None for i in range(self.n)]
            reset_options = {**options, "reset_mask": mask}
            observations, infos = _called(slot, self.vector.reset, seed=seeds, options=reset_options)
            return observations[slot], _unbatch_info(infos, slot)

    def reset_many(self, requests: Mapping[int, ResetRequest]) -> dict[int, tuple[str, dict[str, Any]]]:
        return {slot: self.reset(slot, seed, options) for slot, (seed, options) in requests.items()}

    def replays(self, slot: int) -> int:
        return 0

    def step(self, actions: Mapping[int, str]) -> dict[int, StepResult]:
        """Step the slots in ``actions`` (and no other) with phase ``env_step``."""
        with phase("env_step"):
            if self.vector is None or isinstance(self.vector, gym.vector.SyncVectorEnv):
                envs = self.envs if self.vector is None else self.vector.envs
                return {slot: _called(slot, envs[slot].step, action) for slot, action in actions.items()}
            if isinstance(self.vector, gym.vector.AsyncVectorEnv) and _steps_workers_alone(self.vector):
                return _step_async_workers(self.vector, actions)
            return self._step_whole_vector(actions)

    def _step_whole_vector(self, actions: Mapping[int, str]) -> dict[int, StepResult]:
        assert self.vector is not None
        batch = [actions.get(slot, "") for slot in range(self.n)]  # idle slots get a throwaway action
        observations, rewards, terminated, truncated, infos = self.vector.step(tuple(batch))
        return {
            slot: (
                observations[slot],
                rewards[slot],
                bool(terminated[slot]),
                bool(truncated[slot]),
                _unbatch_info(infos, slot),
            )
            for slot in actions
        }

    def close(self) -> None:
        """Close the envs this pool made (never the caller's)."""
        for env in self._owned:
            env.close()
