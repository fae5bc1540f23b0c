"""What the ``alfworld`` wheel knows about rooms and objects, as plain data for the generator.

Sources (all shipped in the wheel): ``alfworld/gen/layouts/FloorPlan<N>-objects.json`` (the
object types in a scene), ``FloorPlan<N>-openable.json`` (its receptacle instances),
``alfworld/gen/constants.py`` (which receptacle types hold which objects, the heatable /
coolable / cleanable / toggleable classes, room types per task type) and
``alfworld/gen/goal_library.py`` (goal PDDL and task sentences).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources


@dataclass(frozen=True)
class Scene:
    """One AI2-THOR floor plan: its room type, receptacle instances and object types."""

    number: int
    room_type: str
    receptacles: tuple[tuple[str, int], ...]  # (receptacle type, instance count)
    object_types: tuple[str, ...]


@dataclass(frozen=True)
class Affordances:
    """Object and receptacle rules from ``alfworld.gen.constants``."""

    can_contain: dict[str, frozenset[str]]  # receptacle type -> object types it can hold
    pickupable: frozenset[str]
    receptacle_objects: frozenset[str]  # movable receptacles (Mug, Bowl, ...): objects in PDDL
    openable: frozenset[str]
    heatable: frozenset[str]
    coolable: frozenset[str]
    cleanable: frozenset[str]
    toggleable: frozenset[str]
    sliceable: frozenset[str]
    rooms_for_task: dict[str, frozenset[str]]
    scene_numbers: dict[str, tuple[int, ...]]


# The layouts name a sink's / bathtub's basin after the fixture; in PDDL the receptacle is the basin.
_LAYOUT_RECEPTACLE = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
# Receptacles the official games hold a desk lamp on (lamps are never put anywhere, so
# constants.py lists no receptacle that "can contain" one).
LAMP_HOLDERS = frozenset({"Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand"})


@lru_cache(maxsize=1)
def affordances() -> Affordances:
    import alfworld.gen.constants as C

    def unsliced(names) -> frozenset[str]:
        return frozenset(n for n in names if not n.endswith("Sliced"))

    can_contain = {
        r: unsliced(objs) for r, objs in C.VAL_RECEPTACLE_OBJECTS.items() if r not in C.MOVABLE_RECEPTACLES_SET
    }
    containable = frozenset().union(*can_contain.values())
    actions = C.VAL_ACTION_OBJECTS
    return Affordances(
        can_contain=can_contain,
        pickupable=frozenset(containable & set(C.OBJECTS)),
        receptacle_objects=frozenset(C.MOVABLE_RECEPTACLES),
        # Box is openable in THOR but an object (not a receptacle) in the text games.
        openable=frozenset(C.OPENABLE_CLASS_SET - C.MOVABLE_RECEPTACLES_SET),
        heatable=unsliced(actions["Heatable"]),
        coolable=unsliced(actions["Coolable"]),
        cleanable=unsliced(actions["Cleanable"]),
        toggleable=unsliced(actions["Toggleable"]),
        sliceable=unsliced(actions["Sliceable"]),
        rooms_for_task={k: frozenset(v) for k, v in C.GOALS_VALID.items()},
        scene_numbers={k: tuple(v) for k, v in C.SCENE_TYPE.items()},
    )


def _layout_json(name: str):
    path = resources.files("alfworld").joinpath("gen", "layouts", name)
    return json.loads(path.read_text()) if path.is_file() else None


@cache
def load_scene(number: int) -> Scene | None:
    """Floor plan ``number`` from the wheel's layouts (None if the wheel lacks it)."""
    objects = _layout_json(f"FloorPlan{number}-objects.json")
    instances = _layout_json(f"FloorPlan{number}-openable.json")
    if objects is None or instances is None:
        return None
    aff = affordances()
    counts = Counter(_LAYOUT_RECEPTACLE.get(key.split("|")[0], key.split("|")[0]) for key in instances)
    receptacles = tuple(sorted((r, n) for r, n in counts.items() if r in aff.can_contain))
    room = next(room for room, numbers in aff.scene_numbers.items() if number in numbers)
    object_types = tuple(sorted({o for o in objects if o in aff.pickupable or o in aff.toggleable}))
    return Scene(number, room, receptacles, object_types)


def scenes_for(room_types: frozenset[str]) -> list[Scene]:
    aff = affordances()
    found = []
    for room in sorted(room_types):
        for number in aff.scene_numbers[room]:
            scene = load_scene(number)
            if scene is not None:
                found.append(scene)
    return found


def goal_spec(task_type: str) -> dict:
    """``goal_library.gdict[task_type]``: the goal PDDL (with ``#`` for ``-``) and sentence templates."""
    import alfworld.gen.goal_library as glib

    return glib.gdict[task_type]
