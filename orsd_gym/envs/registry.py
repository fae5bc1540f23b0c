"""Registering text envs under the ``orsd_gym/`` namespace.

A user's env becomes a first-class orsd-gym env (rollouts, masking, training, ``compare``)
with one call::

    from orsd_gym.envs import register_text_env
    register_text_env("MyTask", "my_package.my_module:MyTaskEnv", description="...")
    env = gymnasium.make("orsd_gym/MyTask-v0")

Entry points are ``"module:Class"`` strings, so nothing heavy is imported until the env is made;
an env class itself also works (e.g. one defined in a notebook).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from orsd_gym.envs.base import TextEnv
from orsd_gym.envs.lookup import env_creator

NAMESPACE = "orsd_gym"
_NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TextEnvInfo:
    """What `orsd-gym envs` shows for one registered env."""

    env_id: str
    description: str
    entry_point: str


_DESCRIPTIONS: dict[str, TextEnvInfo] = {}


def register_text_env(
    name: str,
    entry_point: str | Callable[..., gym.Env],
    *,
    version: int = 0,
    description: str = "",
    max_episode_steps: int | None = None,
    kwargs: dict[str, Any] | None = None,
) -> str:
    """Register ``orsd_gym/<name>-v<version>`` and return its id.

    ``max_episode_steps`` wraps the env in Gymnasium's `TimeLimit` (the episode is then
    *truncated*, not terminated, when the budget runs out). ``kwargs`` are the default
    constructor arguments; `gymnasium.make` keyword arguments override them.
    """
    if not _NAME_PATTERN.match(name):
        raise ValueError(f"env name {name!r} must start with a letter and use only letters, digits and '_'")
    if not isinstance(version, int) or version < 0:
        raise ValueError(f"version must be a non-negative int, got {version!r}")
    if isinstance(entry_point, str):
        if ":" not in entry_point:
            raise ValueError(f"entry_point {entry_point!r} must look like 'package.module:ClassName'")
    elif not callable(entry_point):
        raise ValueError(f"entry_point must be a 'module:Class' string or an env class, got {entry_point!r}")
    env_id = f"{NAMESPACE}/{name}-v{version}"
    gym.register(
        id=env_id,
        entry_point=entry_point,
        max_episode_steps=max_episode_steps,
        kwargs=dict(kwargs or {}),
        disable_env_checker=False,
    )
    _DESCRIPTIONS[env_id] = TextEnvInfo(env_id, description, _entry_point_name(entry_point))
    return env_id


def _entry_point_name(entry_point: Any) -> str:
    if isinstance(entry_point, str):
        return entry_point
    return f"{getattr(entry_point, '__module__', '?')}:{getattr(entry_point, '__qualname__', repr(entry_point))}"


def registered_text_envs() -> list[TextEnvInfo]:
    """All envs registered in the ``orsd_gym`` namespace (including ones made by plain
    `gymnasium.register`), sorted by id."""
    found = []
    for env_id, spec in gym.registry.items():
        if spec.namespace != NAMESPACE:
            continue
        found.append(_DESCRIPTIONS.get(env_id, TextEnvInfo(env_id, "", _entry_point_name(spec.entry_point))))
    return sorted(found, key=lambda info: info.env_id)


def text_env_class(env_id: str) -> type[TextEnv] | None:
    """The `TextEnv` class registered as ``env_id`` (a ``module:`` prefix is imported first, as
    `gymnasium.make` does), or None when its entry point is not a TextEnv class."""
    creator = env_creator(env_id)
    return creator if isinstance(creator, type) and issubclass(creator, TextEnv) else None
