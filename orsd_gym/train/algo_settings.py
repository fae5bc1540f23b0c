"""An algorithm's typed settings from a config's ``algo`` section (``algo.per_algo``): its base
algorithms' entries, then its own, merged key by key, validated by the algorithm's config class."""

from __future__ import annotations

import dataclasses
import difflib
from typing import TYPE_CHECKING, Any

from orsd_gym import configio
from orsd_gym.algos.base import algorithm_config_class, registered_algorithms
from orsd_gym.errors import ConfigError, UnknownAlgorithmError

if TYPE_CHECKING:  # the config module resolves with this one
    from orsd_gym.train.config import Config


def resolve_algo(config: Config) -> Any:
    """The algorithm's typed config (e.g. `orsd_gym.algos.ORSDConfig`) from ``algo.per_algo``:
    its base algorithms' entries, then its own, merged key by key (a nested setting of its own
    keeps the base's other keys); fails fast, naming the key, on a bad key or value. A new
    object each call: the trainer resolves once and hands the result on."""
    algo = config.algo
    try:
        config_class = algorithm_config_class(algo.name)
    except UnknownAlgorithmError as error:
        raise ConfigError(f"algo.name: {error}") from error
    check_per_algo(algo.per_algo)
    params = configio.merge({}, *(algo.per_algo.get(name, {}) for name in [*_bases(config_class), algo.name]))
    return configio.from_dict(config_class, params, prefix=f"algo.per_algo.{algo.name}.")


def _bases(config_class: type) -> list[str]:
    """Registered algorithms whose config ``config_class`` extends, most basic first."""
    bases = [name for name in registered_algorithms() if algorithm_config_class(name) in config_class.__mro__[1:]]
    return sorted(bases, key=lambda name: -config_class.__mro__.index(algorithm_config_class(name)))


def check_per_algo(per_algo: dict[str, dict[str, Any]]) -> None:
    """Every ``algo.per_algo`` entry names a registered algorithm and only its settings (a
    misspelt name would otherwise be ignored by every run that does not select it)."""
    for name, params in per_algo.items():
        try:
            config_class = algorithm_config_class(name)
        except UnknownAlgorithmError:
            close = difflib.get_close_matches(name, registered_algorithms(), n=1)
            hint = (
                f"did you mean 'algo.per_algo.{close[0]}'?"
                if close
                else f"registered: {', '.join(registered_algorithms())}"
            )
            raise ConfigError(f"algo.per_algo.{name}: no algorithm is registered as {name!r}; {hint}") from None
        if not isinstance(params, dict):
            raise ConfigError(f"algo.per_algo.{name}: expected a mapping of settings, got {type(params).__name__}")
        names = [f.name for f in dataclasses.fields(config_class)]
        for key in params:
            if key == "temperature":
                raise ConfigError(
                    f"algo.per_algo.{name}.temperature: set rollout.temperature (an algorithm scores tokens "
                    "at the temperature the rollouts sampled them at)"
                )
            if key not in names:
                raise ConfigError(f"unknown config key 'algo.per_algo.{name}.{key}'{_hint(name, str(key), names)}")


def _hint(algorithm: str, key: str, names: list[str]) -> str:
    """Where a setting ``algorithm`` does not have may be meant: a close name of its own, or
    the algorithms that have it."""
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"; did you mean 'algo.per_algo.{algorithm}.{close[0]}'?"
    owners = [
        other
        for other in registered_algorithms()
        if key in {f.name for f in dataclasses.fields(algorithm_config_class(other))}
    ]
    return f"; it is a setting of {', '.join(owners)}: algo.per_algo.{owners[0]}.{key}" if owners else ""
