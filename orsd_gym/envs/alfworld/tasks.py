"""Task records and the six ALFWorld task types."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from orsd_gym.errors import UnknownTaskTypeError

#: ALFWorld's six task types, in ALFWorld's own numbering order (TASK_TYPES 1..6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)


@dataclass(frozen=True)
class ALFWorldTask:
    """One playable ALFWorld game.

    ``game_file`` is a TextWorld PDDL game (JSON with ``pddl_domain``, ``grammar``,
    ``pddl_problem``, ``solvable``); ``goal`` is the text after "Your task is to: ".
    """

    game_file: str
    task_type: str
    goal: str
    split: str
    name: str


def normalize_task_types(task_types: Iterable[str] | str | None) -> tuple[str, ...]:
    """Validate a ``task_types`` filter; ``None`` means all six, in the canonical order."""
    if task_types is None:
        return TASK_TYPES
    if isinstance(task_types, str):
        task_types = [task_types]
    chosen = list(dict.fromkeys(task_types))
    unknown = [t for t in chosen if t not in TASK_TYPES]
    if unknown or not chosen:
        raise UnknownTaskTypeError(
            f"task_types={list(task_types)!r}: unknown {unknown!r}; choose from {list(TASK_TYPES)}"
        )
    return tuple(t for t in TASK_TYPES if t in chosen)
