"""Env slots held by Ray actors: CPU-heavy envs (ALFWorld) spread over a cluster's CPUs while
the policy generates, behind the `SlotPool` interface the collector drives.

Each actor (`EnvActor`) holds ``envs_per_actor`` envs; slot ``s`` is env ``s % k`` of actor
``s // k``. Every reset and step is one call to its actor; a round's calls go out together and
their results are taken as each completes (``ray.wait``), so actors work side by side and a
slot's result never waits for a slower actor's. Envs are made inside the actors, which import
``orsd_gym`` (registering its envs) and let `gymnasium.make` import an env id's ``module:``
prefix.

An actor that dies (its process killed, its node lost) is replaced by a new one holding the
same envs. An episode that was running on it is replayed there, from its reset seed and the
actions it took, just before its next step: its trajectory is the one it would have been. The
replayed observations are checked against the recorded ones (`EnvReplayError` if the env is not
deterministic given its seed and actions), and every replay is counted (`RayEnvSlots.replays`,
``extra["env_replays"]`` of the episode's trajectories, ``env_replays`` in the metrics): an
episode is never silently dropped or silently changed. An episode whose actor dies more than
``max_replays`` times fails the rollout (`EnvWorkerError`).
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from orsd_gym.cluster import connect
from orsd_gym.errors import ClusterResourcesError, EnvReplayError, EnvWorkerError
from orsd_gym.plugins import import_plugins, imported_plugins
from orsd_gym.rollout.envpool import ResetRequest, StepResult

#: Seconds the actors may take to start (be scheduled and make their envs) before the pool gives
#: up, saying what it asked the cluster for.
START_TIMEOUT_S = 600.0


class EnvActorLostWarning(UserWarning):
    """An env actor died and was replaced; its running episodes are replayed."""


def _digest(observation: object) -> str:
    # str(): an observation that breaks the contract is reported by the collector, not here.
    return hashlib.blake2b(str(observation).encode("utf-8"), digest_size=16).hexdigest()


@dataclass
class _Replay:
    """What re-creates a slot's episode on a new env: the reset, the actions, and the digests of
    the observations they gave (first the reset's)."""

    seed: int
    options: dict[str, Any]
    actions: list[str] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)


class EnvActor:
    """``count`` envs of one id in one Ray actor (a plain class: `RayEnvSlots` makes it remote)."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], plugins: list[str], count: int) -> None:
        import orsd_gym  # noqa: F401  (registers the built-in envs in this process)

        # The driver's plugins: an env they register is made here as it is there.
        import_plugins(plugins)
        self.envs = [gym.make(env_id, **kwargs) for _ in range(count)]

    def env_id(self) -> str | None:
        spec = self.envs[0].spec
        return None if spec is None else spec.id

    def reset(self, index: int, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        # As the env gave them: the collector checks the contract (`orsd_gym.rollout.contract`).
        return self.envs[index].reset(seed=seed, options=dict(options))

    def step(self, index: int, action: str, replay: _Replay | None = None) -> StepResult:
        """One step of env ``index``; with ``replay``, first re-create its episode (the env was lost)."""
        if replay is not None:
            self._replay(index, replay)
        observation, reward, terminated, truncated, info = self.envs[index].step(action)
        return observation, reward, bool(terminated), bool(truncated), info

    def _replay(self, index: int, replay: _Replay) -> None:
        env = self.envs[index]
        observations = [str(env.reset(seed=replay.seed, options=dict(replay.options))[0])]
        observations += [str(env.step(action)[0]) for action in replay.actions]
        for turn, (observation, digest) in enumerate(zip(observations, replay.digests, strict=True)):
            if _digest(observation) != digest:
                raise EnvReplayError(
                    f"{self.env_id()}: replaying an episode (seed {replay.seed}, options {replay.options}) on a "
                    f"new env gave another observation at step {turn} than the first time; the env must be "
                    "deterministic given its reset seed and actions to survive a lost env actor"
                )

    def close(self) -> None:
        for env in self.envs:
            env.close()


@functools.cache
def _remote_actor_class() -> Any:
    return connect().remote(EnvActor)


class RayEnvSlots:
    """``n`` env slots of ``env_id`` in Ray actors of ``envs_per_actor`` envs each (a `SlotPool`).

    Uses this process's Ray connection, or connects as `orsd_gym.cluster.connect` does (a local
    Ray started on demand). Actors are spread over the cluster's nodes, each reserving
    ``cpus_per_actor`` CPUs (by default none: they share the nodes' CPUs, so they always fit).
    Close it to stop the actors.
    """

    remote = True

    def __init__(
        self,
        env_id: str,
        n: int,
        env_kwargs: dict[str, Any] | None = None,
        *,
        envs_per_actor: int = 4,
        cpus_per_actor: float = 0.0,
        max_replays: int = 3,
    ) -> None:
        if n < 1 or envs_per_actor < 1:
            raise ValueError(f"need n >= 1 and envs_per_actor >= 1, got {n} and {envs_per_actor}")
        self._ray = connect()
        self.n = n
        self.envs_per_actor = envs_per_actor
        self.cpus_per_actor = cpus_per_actor
        self.max_replays = max_replays
        self._make = (env_id, dict(env_kwargs or {}), imported_plugins())
        self._actors = [self._start_actor(a) for a in range(-(-n // envs_per_actor))]
        self._episodes: dict[int, _Replay] = {}
        self._replays: dict[int, int] = {}
        #: Slots whose env was lost since their episode's last call (replayed before the next step).
        self._stale: set[int] = set()
        #: Actors that died and were replaced since the pool started.
        self.lost_actors = 0
        self._env_id = self._wait_for_actors()

    # ------------------------------------------------------------------ actors
    def _start_actor(self, a: int) -> Any:
        count = min(self.envs_per_actor, self.n - a * self.envs_per_actor)
        options = {"num_cpus": self.cpus_per_actor, "max_restarts": 0, "scheduling_strategy": "SPREAD"}
        return _remote_actor_class().options(**options).remote(*self._make, count)

    def _wait_for_actors(self) -> str | None:
        """The env id the actors made (as `gymnasium.make` resolved it), once all have started."""
        ready = [actor.env_id.remote() for actor in self._actors]
        try:
            return self._ray.get(ready, timeout=START_TIMEOUT_S)[0]
        except self._ray.exceptions.GetTimeoutError:
            for actor in self._actors:
                self._ray.kill(actor)
            raise ClusterResourcesError(
                f"{len(self._actors)} env actor(s) of {self.cpus_per_actor} CPU(s) each did not start within "
                f"{START_TIMEOUT_S:.0f} s; the cluster has {self._ray.cluster_resources().get('CPU', 0)} CPUs "
                "(lower env.cpus_per_actor, raise env.envs_per_actor, or add nodes)"
            ) from None

    def _where(self, slot: int) -> tuple[Any, int]:
        actor, index = divmod(slot, self.envs_per_actor)
        return self._actors[actor], index

    def _replace(self, slot: int, dead: Any, error: Exception) -> None:
        """Replace the actor of ``slot`` if it is still ``dead`` (one failure reports once per call)."""
        a = slot // self.envs_per_actor
        if self._actors[a] is not dead:
            return
        warnings.warn(
            f"env actor {a} (slots {a * self.envs_per_actor}..) died ({type(error).__name__}); "
            "replacing it and replaying its episodes",
            EnvActorLostWarning,
            stacklevel=4,
        )
        self._ray.kill(dead)
        self._actors[a] = self._start_actor(a)
        self.lost_actors += 1
        first = a * self.envs_per_actor
        self._stale.update(range(first, min(first + self.envs_per_actor, self.n)))

    # ------------------------------------------------------------------ SlotPool
    @property
    def env_id(self) -> str | None:
        return self._env_id

    def replays(self, slot: int) -> int:
        return self._replays.get(slot, 0)

    def reset_many(self, requests: Mapping[int, ResetRequest]) -> dict[int, tuple[str, dict[str, Any]]]:
        for slot, (seed, options) in requests.items():
            self._episodes[slot] = _Replay(int(seed), dict(options))
            self._replays[slot] = 0
        replies = self._run({slot: functools.partial(self._submit_reset, slot) for slot in requests})
        for slot, (observation, _) in replies.items():
            self._episodes[slot].digests.append(_digest(observation))
        return replies

    def step(self, actions: Mapping[int, str]) -> dict[int, StepResult]:
        calls = {slot: functools.partial(self._submit_step, slot, action) for slot, action in actions.items()}
        results = self._run(calls)
        for slot, result in results.items():
            self._episodes[slot].actions.append(actions[slot])
            self._episodes[slot].digests.append(_digest(result[0]))
        return results

    def close(self) -> None:
        """Close the envs and stop the actors (a dead actor is just forgotten)."""
        closing = [actor.close.remote() for actor in self._actors]
        for actor, done in zip(self._actors, closing, strict=True):
            try:
                self._ray.get(done, timeout=60)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                pass
            self._ray.kill(actor)
        self._actors = []

    # ------------------------------------------------------------------ calls
    def _submit_reset(self, slot: int, retry: bool) -> tuple[Any, Any]:
        actor, index = self._where(slot)
        self._stale.discard(slot)
        if retry:
            self._count_replay(slot)
        episode = self._episodes[slot]
        return actor, actor.reset.remote(index, episode.seed, episode.options)

    def _submit_step(self, slot: int, action: str, retry: bool) -> tuple[Any, Any]:
        actor, index = self._where(slot)
        replay = None
        if slot in self._stale:
            self._stale.discard(slot)
            self._count_replay(slot)
            replay = self._episodes[slot]
        return actor, actor.step.remote(index, action, replay)

    def _count_replay(self, slot: int) -> None:
        self._replays[slot] = self._replays.get(slot, 0) + 1
        if self._replays[slot] > self.max_replays:
            episode = self._episodes[slot]
            raise EnvWorkerError(
                f"the env actor of slot {slot} died {self._replays[slot]} times during one episode "
                f"(seed {episode.seed}, options {episode.options}); giving up on it"
            )

    def _run(self, calls: Mapping[int, Callable[[bool], tuple[Any, Any]]]) -> dict[int, Any]:
        """Submit every slot's call, take the results as they complete, redo a call whose actor
        died on the actor that replaces it."""
        pending: dict[Any, tuple[int, Any]] = {}
        for slot, submit in calls.items():
            actor, ref = submit(False)
            pending[ref] = (slot, actor)
        results: dict[int, Any] = {}
        while pending:
            [ref], _ = self._ray.wait(list(pending), num_returns=1)
            slot, actor = pending.pop(ref)
            try:
                results[slot] = self._ray.get(ref)
            except self._ray.exceptions.RayActorError as error:
                self._replace(slot, actor, error)
                actor, ref = calls[slot](True)
                pending[ref] = (slot, actor)
        return results
