"""Code of one's own that registers envs, algorithms or probes: imported before a config is checked.

An env, an algorithm or a probe of one's own is registered when the module that defines it is
imported (`orsd_gym.envs.register_text_env`, `orsd_gym.algos.register_algorithm`,
`orsd_gym.probes.register_probe`). Two ways make that happen in every process of a run without
a line of glue:

* a config's ``plugins``: module names (``my_package.my_algo``) or paths to Python files
  (``my_algo.py``), imported when the config is made, so the command that loads it, a resumed run
  and every Ray worker and env actor (`imported_plugins` travels with them) see the same
  registrations;
* an installed package's entry points in the group ``orsd_gym.plugins`` (``[project.entry-points.
  "orsd_gym.plugins"] my_algo = "my_package.my_algo"``), imported once per process by every
  ``orsd-gym`` command, `orsd_gym.train.load_config`, a config that names plugins, and Ray
  workers and env actors.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from orsd_gym.errors import PluginError

ENTRY_POINT_GROUP = "orsd_gym.plugins"

#: What this process imported as plugins, in order (files by absolute path): what a Ray worker
#: or env actor imports before it makes anything.
_IMPORTED: dict[str, ModuleType] = {}


def import_plugins(plugins: Iterable[str]) -> None:
    """Import the installed packages' plugins (once) and then each of ``plugins``; a plugin
    that is missing or fails to import is a `PluginError` naming it and the cause."""
    installed_plugins()
    for plugin in plugins:
        import_plugin(plugin)


def import_plugin(plugin: str) -> ModuleType:
    """Import one plugin: a path ending in ``.py`` (relative to the working directory) or a
    module name; importing the same one again is free."""
    key = str(Path(plugin).resolve()) if plugin.endswith(".py") else plugin
    if key not in _IMPORTED:
        _IMPORTED[key] = _import_file(plugin, Path(key)) if plugin.endswith(".py") else _import_module(plugin)
    return _IMPORTED[key]


def imported_plugins() -> list[str]:
    """The plugins this process imported from configs (files by absolute path), in order."""
    return list(_IMPORTED)


@functools.cache
def installed_plugins() -> tuple[str, ...]:
    """Import every ``orsd_gym.plugins`` entry point of the installed packages (once per
    process); returns their names."""
    loaded = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {entry.name!r} ({entry.value}) of the installed package {_distribution(entry)}"
        try:
            entry.load()
        except Exception as error:
            raise PluginError(f"plugin {where} does not import: {type(error).__name__}: {error}") from error
        loaded.append(entry.name)
    return tuple(loaded)


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and name.startswith(error.name):
            raise PluginError(
                f"plugins: no module named {name!r} (install it, put its directory on PYTHONPATH, or name "
                "its file: plugins=[path/to/module.py])"
            ) from error
        raise PluginError(f"plugins: module {name!r} does not import: {error}") from error
    except Exception as error:
        raise PluginError(f"plugins: module {name!r} does not import: {type(error).__name__}: {error}") from error


def _import_file(given: str, path: Path) -> ModuleType:
    if not path.is_file():
        raise PluginError(f"plugins: {given!r} is not a file (resolved to {path})")
    # The same name in every process that imports this file, so that pickled objects of its
    # classes load in Ray workers.
    digest = hashlib.blake2b(str(path).encode("utf-8"), digest_size=6).hexdigest()
    name = f"orsd_gym_plugin_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugins: {given!r} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an imported module is: pickle and dataclasses look it up.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise PluginError(f"plugins: {given!r} does not import: {type(error).__name__}: {error}") from error
    return module


def _distribution(entry: importlib.metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    return "?" if dist is None else f"{dist.name} {dist.version}"
