"""Joining a Ray cluster, or starting a local one on demand: the one place that calls ``ray.init``.

Ray is optional (``pip install "orsd-gym[ray]"``); it runs data-parallel training workers
(`orsd_gym.train.launch`) and env actors (`orsd_gym.rollout.ray_envs`). Processes Ray starts
import this package from the same place the driver does: a local Ray inherits the driver's
environment (``PYTHONPATH`` included) and Ray adds the driver's working directory to their
import path; on a cluster, install ``orsd-gym`` (and any module that registers your env) on
every node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

from orsd_gym.errors import RayUnavailableError


def import_ray() -> ModuleType:
    """The ``ray`` module; `RayUnavailableError` (saying how to install it) when it is missing."""
    try:
        import ray
    except ImportError as error:
        raise RayUnavailableError(
            f"Ray is not installed ({error}); install it with: pip install 'orsd-gym[ray]'"
        ) from error
    return ray


def connect(address: str | None = None) -> ModuleType:
    """``ray``, connected: the connection this process already has, else the cluster at
    ``address`` (None: a cluster `ray start` made on this machine, else a new local Ray that
    lives as long as this process; "auto": the running cluster; "HOST:PORT"; "ray://HOST:PORT")."""
    ray = import_ray()
    if not ray.is_initialized():
        # Without the dashboard (ray[default]) Ray Train's placement-group cleaner warns every
        # few seconds that it cannot query actor states; Ray's Python loggers show errors only.
        ray.init(address=address, logging_config=ray.LoggingConfig(log_level="ERROR"))
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None) -> Iterator[ModuleType]:
    """`connect` for the duration of a ``with`` block; a connection made here is closed at its
    end (and a local Ray started here stopped), one that existed before is left as it was."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    connect(address)
    try:
        yield ray
    finally:
        ray.shutdown()
