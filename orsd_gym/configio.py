"""Dataclass configs from YAML files and dotted command-line overrides.

``load(Config, "file.yaml", ["optim.lr=1e-5", "algo.name=orsd"])`` builds a nested dataclass,
coercing every value to its field's annotated type. A key that does not exist or a value of
the wrong type fails fast with a `ConfigError` that names the key (and suggests the closest
valid one), before any model is loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

from orsd_gym.errors import ConfigError

T = TypeVar("T")

#: Example configs installed with the package, usable by name (``--config alfworld_cpu``).
SHIPPED_CONFIGS = Path(__file__).resolve().parent / "configs"


def from_dict(cls: type[T], data: Mapping[str, Any] | None, *, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a (nested) mapping, validating keys and types."""
    data = dict(data or {})
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__}")
    renamed = getattr(cls, "renamed_keys", {})
    if renamed:
        data = rename_keys(data, renamed, note=True)
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    # Every mistake of the config at once, not one per attempt.
    problems = []
    moved = getattr(cls, "moved_keys", {})
    for key in (key for key in data if key not in names):
        if key in moved:
            problems.append(f"'{prefix}{key}' is no longer read: {moved[key]}")
            continue
        close = difflib.get_close_matches(str(key), names, n=1)
        hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; valid keys: {', '.join(names)}"
        problems.append(f"unknown config key '{prefix}{key}'{hint}")
    kwargs = {}
    for name in (name for name in names if name in data):
        try:
            kwargs[name] = _coerce(hints[name], data[name], f"{prefix}{name}")
        except ConfigError as error:
            problems.extend(getattr(error, "problems", [str(error)]))
    if problems:
        raise config_errors(problems)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"{prefix.rstrip('.') or cls.__name__}: {error}") from error


def rename_keys(data: Mapping[str, Any], renamed: Mapping[str, str], *, note: bool = False) -> dict[str, Any]:
    """``data`` with each setting under an old dotted key (``renamed``: old -> new) moved to its
    new key (a value the new key already has wins); ``note`` says so on stderr, one line. A
    class's ``renamed_keys`` are applied by `from_dict`: files, overrides and recorded runs
    written with an old spelling load as the new one."""
    data = copy_tree(data)
    moved = []
    for old, new in renamed.items():
        *path, name = old.split(".")
        node = data
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, dict) or name not in node:
            continue
        value = node.pop(name)
        *path, name = new.split(".")
        target = data
        for part in path:
            target = target.setdefault(part, {})
        target.setdefault(name, value)
        moved.append(f"{old} -> {new}")
    if moved and note:
        print(f"note: settings renamed, read as the new spelling: {', '.join(moved)}", file=sys.stderr)
    return data


def copy_tree(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a nested mapping whose mappings can be changed without changing ``data``'s."""
    return {key: copy_tree(value) if isinstance(value, Mapping) else value for key, value in data.items()}


def config_errors(problems: Sequence[str]) -> ConfigError:
    """One `ConfigError` listing every problem (``.problems`` keeps them apart)."""
    message = (
        problems[0]
        if len(problems) == 1
        else f"{len(problems)} problems in the config:\n" + "\n".join(f"  - {problem}" for problem in problems)
    )
    error = ConfigError(message)
    error.problems = list(problems)  # type: ignore[attr-defined]
    return error


def to_dict(config: Any) -> dict[str, Any]:
    """A plain (YAML/JSON-safe) dict of a config dataclass."""
    return dataclasses.asdict(config)


def load(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Read ``path`` (YAML; optional), apply ``key.sub=value`` overrides, build ``cls``."""
    data: dict[str, Any] = {}
    if path is not None:
        path = resolve_config_path(path)
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {error}") from error
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a mapping at the top level")
        data = loaded or {}
    for override in overrides:
        apply_override(data, override)
    return from_dict(cls, data)


def merge(base: Mapping[str, Any], *overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by each override in turn, nested mappings key by key: every layering of
    settings (a file under its overrides, an algorithm's settings over its base algorithm's, an
    arm's over the comparison's, the evaluation side's env arguments over the training side's)
    goes through here, so ``{"reward": {"no_progress_penalty": 0.2}}`` keeps the other reward
    settings instead of replacing the whole mapping."""
    merged = dict(base)
    for override in overrides:
        for key, value in override.items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = merge(merged[key], value)
            else:
                merged[key] = value
    return merged


def shipped_configs() -> list[str]:
    """Names of the example configs that ship with the package (``orsd_gym/configs/*.yaml``)."""
    return sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml"))


def resolve_config_path(path: str | Path) -> Path:
    """A config file path, or the name of a shipped config (``alfworld_cpu``)."""
    candidate = Path(path)
    if candidate.is_file():
        return candidate
    shipped = SHIPPED_CONFIGS / f"{candidate.name.removesuffix('.yaml')}.yaml"
    if candidate.parent == Path(".") and shipped.is_file():
        return shipped
    raise ConfigError(f"config file {str(path)!r} does not exist (shipped configs: {', '.join(shipped_configs())})")


def apply_override(data: dict[str, Any], override: str) -> None:
    """Set ``data[a][b] = value`` for an override ``"a.b=value"`` (value parsed as YAML), exactly
    as written: a mapping value replaces the mapping there (``env.kwargs={}`` clears it); set one
    nested key with a longer key (``algo.per_algo.grpo.reward.outcome=return``)."""
    key, sep, raw = override.partition("=")
    key = key.strip().lstrip("-")
    if not sep or not key:
        raise ConfigError(f"override {override!r} must look like 'section.key=value'")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {override!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def _coerce(annotation: Any, value: Any, key: str) -> Any:
    """``value`` checked (and where lossless, converted) against the field type ``annotation``."""
    if annotation is Any:
        return value
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(get_args(annotation), value, key)
    if origin is Literal:
        if value not in get_args(annotation):
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(repr, get_args(annotation)))}")
        return value
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a section (mapping), got {value!r}")
        return from_dict(annotation, value, prefix=f"{key}.")
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        return _coerce_sequence(annotation, value, key)
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    scalar = _SCALARS.get(annotation)
    return scalar(value, key) if scalar is not None else value


def _coerce_union(options: tuple[Any, ...], value: Any, key: str) -> Any:
    if value is None and type(None) in options:
        return None
    errors = []
    for option in (a for a in options if a is not type(None)):
        try:
            return _coerce(option, value, key)
        except ConfigError as error:
            errors.append(str(error))
    raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")


def _coerce_sequence(annotation: Any, value: Any, key: str) -> Any:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list, got {value!r}")
    args = get_args(annotation)
    item_type = args[0] if args else Any
    items = [_coerce(item_type, item, f"{key}[{i}]") for i, item in enumerate(value)]
    return tuple(items) if get_origin(annotation) is tuple or annotation is tuple else items


def _coerce_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{key}: expected true/false, got {value!r}")


def _coerce_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    return value


def _coerce_float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str):
            try:
                return float(value)  # YAML reads "1e-5" as a string
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    return float(value)


def _coerce_str(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


_SCALARS = {bool: _coerce_bool, int: _coerce_int, float: _coerce_float, str: _coerce_str}
