"""Checks of a config's names before anything loads: env id, env arguments, model names, and
whether its data-parallel settings can work.

Each failure is a `ConfigError` naming the key, with a suggestion where one is close, raised
in well under a second (no model, engine or dataset is loaded). What can only be judged by
making the env (a value out of range, missing data) is checked by the task plan, which makes
each side's env once before training starts.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym

import orsd_gym  # noqa: F401  (registers the built-in envs)
from orsd_gym.envs.lookup import env_creator
from orsd_gym.errors import ConfigError, ModelNotFoundError, UnknownEnvError
from orsd_gym.policies.models import check_model_name

if TYPE_CHECKING:  # the config module calls this one while loading
    from orsd_gym.train.config import Config

#: Keyword arguments `gymnasium.make` takes itself (not passed to the env's constructor).
MAKE_KWARGS = frozenset({"max_episode_steps", "disable_env_checker", "autoreset", "apply_api_compatibility"})


def validate_settings(config: Config, algo_settings: Any) -> None:
    """The env id and its constructor arguments (training, evaluation and warm-start sides), the
    model names and the data-parallel settings of ``config``, and what the algorithm's settings
    (``resolve_algo``) need of the env; raises `ConfigError` on the first bad one."""
    try:
        creator = env_creator(config.env.id)
    except UnknownEnvError as error:
        raise ConfigError(f"env.id: {error}") from error
    if algo_settings.needs_expert_plans and not config.env.kwargs.get("expert"):
        raise ConfigError(
            f"algo.per_algo.orsd.rubric_source={algo_settings.rubric_source!r} needs the env's expert plan in the "
            "trajectories: set env.kwargs.expert=reset (or true, which also gives credit alignment)"
        )
    sides = [("env.kwargs", config.env.kwargs), ("eval.env_kwargs", config.eval.env_kwargs)]
    if config.warm_start.episodes > 0:
        sides.append(("warm_start.env_kwargs", config.warm_start.env_kwargs))
    for key, kwargs in sides:
        check_env_kwargs(creator, kwargs, key, config.env.id)
    for key, name in (("model.name", config.model.name), ("model.verifier", config.model.verifier)):
        if name is not None:
            try:
                check_model_name(name)
            except ModelNotFoundError as error:
                raise ConfigError(f"{key}: {error}") from error
    check_workers(config)


def check_workers(config: Config) -> None:
    """Data-parallel workers each need a task group of every iteration (a group never spans
    workers) and take the same number of optimiser steps; a GPU per worker needs a CUDA model."""
    train, rollout, optim = config.train, config.rollout, config.optim
    if train.use_gpu and config.model.device != "cuda":
        raise ConfigError(
            f"train.use_gpu=true runs the model on each worker's GPU: set model.device=cuda "
            f"(it is {config.model.device!r})"
        )
    if train.workers == 1:
        return
    if config.model.device.startswith("cuda:"):
        raise ConfigError(
            f"model.device={config.model.device!r} with train.workers={train.workers}: set model.device=cuda "
            "(each worker uses its own GPU)"
        )
    if rollout.tasks_per_iteration < train.workers:
        raise ConfigError(
            f"train.workers={train.workers} needs rollout.tasks_per_iteration >= {train.workers} "
            f"(it is {rollout.tasks_per_iteration}): every worker plays whole task groups"
        )
    fewest = rollout.tasks_per_iteration // train.workers * rollout.group_size
    if optim.minibatches > fewest:
        raise ConfigError(
            f"optim.minibatches={optim.minibatches} but a worker may have only {fewest} episodes per iteration "
            f"with train.workers={train.workers}: every worker must take the same optimiser steps"
        )


def check_env_kwargs(creator: Callable[..., gym.Env], kwargs: Mapping[str, Any], key: str, env_id: str) -> None:
    """Every name in ``kwargs`` is a constructor argument of ``creator`` (or one `gymnasium.make`
    takes), unless the constructor takes ``**kwargs``."""
    target = creator.__init__ if inspect.isclass(creator) else creator
    parameters = inspect.signature(target).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    accepted = {name for name in parameters if name != "self"} | MAKE_KWARGS
    for name in kwargs:
        if name not in accepted:
            close = difflib.get_close_matches(str(name), sorted(accepted), n=1)
            hint = f"; did you mean '{key}.{close[0]}'?" if close else f"; {env_id} takes {', '.join(sorted(accepted))}"
            raise ConfigError(f"{key}.{name}: {env_id} has no argument {name!r}{hint}")
