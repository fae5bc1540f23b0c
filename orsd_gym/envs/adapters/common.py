"""What the adapters share: importing their library, naming a task by its content, and the
training / held-out split that follows from that name.

A source library draws its tasks from seeds, and two seeds can draw the same task (GuessTheNumber
has 20 hidden numbers; a reasoning-gym dataset can repeat a question). Splitting by seed would
then put one task on both sides. So each task is named by a hash of its content (the question,
or the game's starting state) and held out when that hash is 0 modulo `HOLD_OUT_EVERY`: equal
content always lands on the same side, which is what lets the task plan prove that evaluation
never plays a task that training played.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from orsd_gym.envs.base import TaskSplits
from orsd_gym.errors import OrsdGymError, TaskSplitError

SPLITS = ("all", "train", "eval")
#: One task in this many (by content hash) is held out for evaluation.
HOLD_OUT_EVERY = 5
#: Hex digits of a task's content hash kept in its key.
KEY_DIGITS = 16


class AdapterUnavailableError(OrsdGymError, ImportError):
    """An adapter's source library is not installed."""


def library_installed(module: str) -> bool:
    """Whether ``module`` can be imported (checked without importing it)."""
    return importlib.util.find_spec(module) is not None


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``, or say which extra of orsd-gym installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise AdapterUnavailableError(
            f"this env needs the {module!r} library: pip install 'orsd-gym[{extra}]' ({error})"
        ) from error


def adapter_description(what: str, module: str, extra: str) -> str:
    """An adapter's line in `orsd-gym envs`, with the install command while its library is missing."""
    return what if library_installed(module) else f"{what} (not installed: pip install 'orsd-gym[{extra}]')"


def content_key(*parts: Any) -> str:
    """A stable hash of ``parts`` (the same in every process: sets are sorted, arrays listed)."""
    text = json.dumps(_plain(parts), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_DIGITS]


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(item) for item in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _plain(value.tolist())
    # A game's own objects by their fields: a default repr holds a memory address.
    slots = [name for cls in type(value).__mro__ for name in getattr(cls, "__slots__", ()) if hasattr(value, name)]
    if slots or hasattr(value, "__dict__"):
        fields = {name: getattr(value, name) for name in slots} | getattr(value, "__dict__", {})
        return {"class": type(value).__name__, "fields": _plain(fields)}
    return repr(value)


def is_held_out(key: str) -> bool:
    """Whether the task with content hash ``key`` is on the held-out side."""
    return int(key, 16) % HOLD_OUT_EVERY == 0


def check_split(split: Any) -> str:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; choose one of {SPLITS}")
    return split


def distinct_on_side(keys: Sequence[str], split: str) -> list[int]:
    """Indices of ``keys`` that are the first of their content and on side ``split``, in order."""
    seen: set[str] = set()
    chosen = []
    for index, key in enumerate(keys):
        if key in seen:
            continue
        seen.add(key)
        if split == "all" or is_held_out(key) == (split == "eval"):
            chosen.append(index)
    return chosen


def content_splits(kwargs: Mapping[str, Any], env_name: str) -> TaskSplits:
    """The `TaskSplits` of an adapter whose ``split`` argument selects a side of `distinct_on_side`."""
    split = check_split(kwargs.get("split", "all"))
    if split == "eval":
        raise TaskSplitError(f"split='eval' holds {env_name}'s held-out tasks; train on split='train'")
    return TaskSplits(
        train={"split": "train"},
        held_out={"split": "eval"},
        description=(
            f"tasks whose content hash is 0 mod {HOLD_OUT_EVERY} are held out "
            "(a task drawn twice is one task, on one side)"
        ),
    )
