"""The envs a run plays side by side, made once and kept for the whole run.

The collector resets each slot itself when an episode starts, so one pool serves every
iteration: a list of in-process envs, an async vector env (one subprocess each), or env slots
in Ray actors (``env.backend: ray``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import orsd_gym  # noqa: F401  (registers the built-in envs)
from orsd_gym.rollout.envpool import SlotPool
from orsd_gym.train.config import EnvConfig

Envs = list[gym.Env] | gym.vector.VectorEnv | SlotPool


def make_envs(env: EnvConfig, kwargs: dict[str, Any], count: int) -> Envs:
    """``count`` envs of ``env.id`` made with ``kwargs`` and the run's step limit."""
    kwargs = dict(kwargs)
    if env.max_episode_steps is not None:
        kwargs["max_episode_steps"] = env.max_episode_steps
    if env.backend == "ray":
        from orsd_gym.rollout.ray_envs import RayEnvSlots

        return RayEnvSlots(env.id, count, kwargs, envs_per_actor=env.envs_per_actor, cpus_per_actor=env.cpus_per_actor)
    if env.vectorization == "async":
        return gym.make_vec(env.id, num_envs=count, vectorization_mode="async", **kwargs)
    return [gym.make(env.id, **kwargs) for _ in range(count)]


def close_envs(envs: Envs | None) -> None:
    for env in envs if isinstance(envs, list) else [envs] if envs is not None else []:
        env.close()


class RunEnvs:
    """A run's two sides of envs, each made on first use: the training side (enough for this
    worker's share of an iteration's groups) and the evaluation side (the training envs when
    both sides are one env)."""

    def __init__(self, config: Any, plan: Any, workers: Any) -> None:
        self.config, self.plan, self.workers = config, plan, workers
        self._train: Envs | None = None
        self._eval: Envs | None = None

    @property
    def train(self) -> Envs:
        if self._train is None:
            rollout = self.config.rollout
            episodes = self.workers.most(rollout.tasks_per_iteration) * rollout.group_size
            self._train = make_envs(self.config.env, self.plan.train_kwargs, self.config.env.num_envs or episodes)
        return self._train

    @property
    def eval(self) -> Envs:
        if self.plan.eval_kwargs == self.plan.train_kwargs:
            return self.train
        if self._eval is None:
            episodes = max(1, self.workers.most(self.config.eval.num_tasks)) * self.config.eval.group_size
            self._eval = make_envs(self.config.env, self.plan.eval_kwargs, self.config.env.num_envs or episodes)
        return self._eval

    def close(self) -> None:
        close_envs(self._train)
        close_envs(self._eval)
        self._train = self._eval = None
