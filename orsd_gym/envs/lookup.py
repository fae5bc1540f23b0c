"""From an env id to what `gymnasium.make` would build, in one place.

Presentation, registration, validation and the task plan all ask "what is ``env_id``?"; they
ask here. This module imports no env module, so the env base class and its presentation hooks
can both use it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from orsd_gym.errors import UnknownEnvError


def env_creator(env_id: str) -> Callable[..., gym.Env]:
    """What ``env_id`` makes: usually the env class. A ``module:`` prefix is imported first, as
    `gymnasium.make` does. `UnknownEnvError` names the closest registered id when there is none."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UnknownEnvError(f"cannot import module {module!r} of {env_id!r}: {error}") from error
    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=1, cutoff=0.6)
        close = close or [i for i in gym.registry if i.lower() == name.lower()]
        hint = f"; did you mean {close[0]!r}?" if close else "; `orsd-gym envs` lists the registered ones"
        raise UnknownEnvError(f"unknown env {name!r}{hint}")
    entry_point = gym.spec(name).entry_point
    if not isinstance(entry_point, str):
        return entry_point
    try:
        return load_env_creator(entry_point)
    except (ImportError, AttributeError, ValueError) as error:
        message = f"{name!r} is registered with entry point {entry_point!r}, which does not load: {error}"
        raise UnknownEnvError(message) from error


def env_class(env_id: str, base: type) -> type | None:
    """The class ``env_id`` makes when it is a subclass of ``base``, else None (a factory
    function, another kind of env, or an id that does not resolve)."""
    try:
        creator = env_creator(env_id)
    except UnknownEnvError:
        return None
    return creator if isinstance(creator, type) and issubclass(creator, base) else None
