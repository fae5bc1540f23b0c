"""Procedurally generated ALFWorld tasks for all six task types, built only from the wheel.

A task is sampled from an explicit seed: a floor plan of a room type ALFRED allows for the task
type (from the training floor plans, or from the held-out ones: see `is_held_out_floor_plan`),
the goal objects and receptacle (``goal_library``'s goal PDDL and sentence templates), then a
room trimmed to ``max_receptacles`` receptacle instances with the goal objects and
``num_distractors`` other objects placed where ``constants.py`` says they can be. The result is
a standard TextWorld PDDL game (JSON ``pddl_domain``, ``grammar``, ``pddl_problem``,
``solvable``) played by the same engine as the official games.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from orsd_gym.envs.alfworld.logic import WORDINGS, game_logic
from orsd_gym.envs.alfworld.scenes import LAMP_HOLDERS, Scene, affordances, goal_spec, scenes_for
from orsd_gym.envs.alfworld.tasks import TASK_TYPES
from orsd_gym.errors import GenerationError, UnknownWordingError

#: Bump when generated games change for the same config and seed (it is part of the cache key).
GENERATOR_VERSION = 2
#: Floor plans whose number is a multiple of this (FloorPlan5, 10, ..., 205, ...) make the
#: held-out evaluation tasks; training tasks never use them.
HELD_OUT_FLOOR_PLAN_EVERY = 5

# The state-changing appliance each task type needs, and what ALFRED never uses as the
# task's target receptacle (the appliance itself, and basins).
_APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
_NEVER_TARGET = frozenset({"SinkBasin", "BathtubBasin"})


@dataclass(frozen=True)
class GeneratorConfig:
    """Difficulty knobs of the generated task pool.

    ``max_receptacles`` caps the receptacle instances in a room (the ones the task needs are
    always kept; ``None`` keeps the whole floor plan); ``num_distractors`` is the number of
    objects besides the goal objects; ``wording`` picks the action grammar ("2.1.1": the
    official games' ``put X in/on Y``; "wheel": the wheel's ``move X to Y``).
    """

    num_tasks: int = 60
    max_receptacles: int | None = 8
    num_distractors: int = 6
    wording: str = "2.1.1"
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.num_tasks, int) or self.num_tasks < 1:
            raise ValueError(f"generator num_tasks must be an int >= 1, got {self.num_tasks!r}")
        if self.max_receptacles is not None and (not isinstance(self.max_receptacles, int) or self.max_receptacles < 1):
            raise ValueError(f"generator max_receptacles must be None or an int >= 1, got {self.max_receptacles!r}")
        if not isinstance(self.num_distractors, int) or self.num_distractors < 0:
            raise ValueError(f"generator num_distractors must be an int >= 0, got {self.num_distractors!r}")
        if self.wording not in WORDINGS:
            raise UnknownWordingError(f"generator wording={self.wording!r}; choose one of {WORDINGS}")
        if not isinstance(self.seed, int):
            raise ValueError(f"generator seed must be an int, got {self.seed!r}")

    @classmethod
    def from_value(cls, value: GeneratorConfig | dict[str, Any] | None) -> GeneratorConfig:
        """Accept a config, a dict of its fields (e.g. from YAML) or None (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise ValueError(f"unknown generator option(s) {unknown}; known: {sorted(known)}")
            return cls(**value)
        raise TypeError(f"generator must be a GeneratorConfig, a dict or None, got {type(value).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TaskSpec:
    """What a generated task asks for (names are ALFRED class names, e.g. "Apple", "CounterTop")."""

    task_type: str
    scene: int
    obj: str
    recep: str  # "" for look_at_obj_in_light
    toggle: str  # "" unless look_at_obj_in_light
    goal: str


def is_held_out_floor_plan(scene_number: int) -> bool:
    """True for the floor plans reserved for held-out tasks (6 of the 30 of each room type).

    Splitting by floor plan makes training and evaluation tasks disjoint by construction: an
    evaluation task is in a room no training task is in, so it cannot repeat one by chance.
    """
    return scene_number % HELD_OUT_FLOOR_PLAN_EVERY == 0


def _choice(rng: np.random.Generator, items):
    items = list(items)
    return items[int(rng.integers(len(items)))]


def _mangle(kind: str, index: int) -> str:
    # ALFWorld's demangler names an entity after the text before "_bar_" (plus "basin" when the
    # id contains it, which is how the official games spell sink and bathtub basins).
    if kind in ("SinkBasin", "BathtubBasin"):
        return f"{kind[:-5]}_bar_{index:02d}_bar_{kind}"
    return f"{kind}_bar_{index:02d}"


def _candidate_specs(task_type: str, scene: Scene) -> list[tuple[str, str, str]]:
    """All (obj, recep, toggle) goal parameters this scene supports for the task type."""
    aff = affordances()
    recep_types = {r for r, _ in scene.receptacles}
    objects = set(scene.object_types)
    if task_type == "look_at_obj_in_light":
        if "DeskLamp" not in objects or not recep_types & LAMP_HOLDERS:
            return []
        holders = [r for r in recep_types if any(o in aff.can_contain[r] for o in objects - {"DeskLamp"})]
        return [
            (o, "", "DeskLamp")
            for o in sorted(objects & aff.pickupable)
            if any(o in aff.can_contain[r] for r in holders)
        ]
    appliance = _APPLIANCE.get(task_type)
    if appliance is not None and appliance not in recep_types:
        return []
    needed = {
        "pick_clean_then_place_in_recep": aff.cleanable,
        "pick_heat_then_place_in_recep": aff.heatable,
        "pick_cool_then_place_in_recep": aff.coolable,
    }.get(task_type, aff.pickupable)
    specs = []
    for obj in sorted(objects & aff.pickupable & needed):
        targets = [r for r in sorted(recep_types - _NEVER_TARGET - {appliance}) if obj in aff.can_contain[r]]
        # The goal object must also have somewhere other than the target to start from.
        sources = {r for r in recep_types if obj in aff.can_contain[r]}
        specs += [(obj, recep, "") for recep in targets if sources - {recep}]
    return specs


def sample_task(
    task_type: str, config: GeneratorConfig, rng: np.random.Generator, *, held_out: bool = False
) -> tuple[TaskSpec, str]:
    """Draw one task of ``task_type`` in a training (or, with ``held_out``, a held-out) floor
    plan: its spec and PDDL problem text."""
    aff = affordances()
    scenes = [
        s
        for s in scenes_for(aff.rooms_for_task[task_type])
        if is_held_out_floor_plan(s.number) == held_out and _candidate_specs(task_type, s)
    ]
    if not scenes:
        side = "held-out" if held_out else "training"
        raise GenerationError(f"no {side} floor plan in the alfworld wheel supports task type {task_type!r}")
    scene = _choice(rng, scenes)
    obj, recep, toggle = _choice(rng, _candidate_specs(task_type, scene))
    template = _choice(rng, goal_spec(task_type)["templates"])
    goal = template.format(obj=obj.lower(), recep=recep.lower(), toggle=toggle.lower(), mrecep="")
    spec = TaskSpec(task_type, scene.number, obj, recep, toggle, goal)
    return spec, _build_problem(spec, scene, config, rng)


def _build_problem(spec: TaskSpec, scene: Scene, config: GeneratorConfig, rng: np.random.Generator) -> str:
    aff = affordances()
    instances = [(r, i) for r, n in scene.receptacles for i in range(1, n + 1)]
    by_type: dict[str, list[tuple[str, int]]] = {}
    for r, i in instances:
        by_type.setdefault(r, []).append((r, i))

    # Receptacles the task needs: its target, its appliance, the lamp's holder, a start for the
    # goal object(s) that is not the target type.
    required: list[tuple[str, int]] = []

    def require(kind_options) -> tuple[str, int]:
        kind = _choice(rng, sorted(kind_options))
        already = [x for x in required if x[0] == kind]
        pick = already[0] if already else _choice(rng, by_type[kind])
        if pick not in required:
            required.append(pick)
        return pick

    if spec.recep:
        require([spec.recep])
    appliance = _APPLIANCE.get(spec.task_type)
    if appliance:
        require([appliance])
    lamp_holder = require([r for r in by_type if r in LAMP_HOLDERS]) if spec.toggle else None
    n_goal_objects = 2 if spec.task_type == "pick_two_obj_and_place" else 1
    sources = sorted(r for r in by_type if spec.obj in aff.can_contain[r] and r != spec.recep)
    goal_starts = [require(sources) for _ in range(n_goal_objects)]

    others = [x for x in instances if x not in required]
    rng.shuffle(others)
    budget = len(instances) if config.max_receptacles is None else max(config.max_receptacles, len(required))
    chosen = required + others[: budget - len(required)]
    chosen.sort()

    # Objects: (type, receptacle) placements.
    placements: list[tuple[str, tuple[str, int]]] = [(spec.obj, start) for start in goal_starts]
    if spec.toggle:
        placements.append((spec.toggle, lamp_holder))
    distractor_types = [o for o in scene.object_types if o not in aff.toggleable and o != spec.obj]
    for _ in range(config.num_distractors):
        kind = _choice(rng, distractor_types)
        homes = [x for x in chosen if kind in aff.can_contain[x[0]]]
        if homes:
            placements.append((kind, _choice(rng, homes)))

    return _problem_text(chosen, placements, spec, rng)


def _problem_text(receptacles, placements, spec: TaskSpec, rng: np.random.Generator) -> str:
    aff = affordances()
    counts: dict[str, int] = {}
    objects = []
    for kind, home in placements:
        counts[kind] = counts.get(kind, 0) + 1
        objects.append((kind, _mangle(kind, counts[kind]), home))
    recep_ids = {r: _mangle(r[0], r[1]) for r in receptacles}
    # One location per receptacle; the agent starts at a spot of its own (as in the 2.1.1 games).
    order = list(range(1, len(receptacles) + 2))
    rng.shuffle(order)
    loc_of = {r: f"loc_bar_{order[k]}" for k, r in enumerate(receptacles)}
    start = f"loc_bar_{order[-1]}"

    rtypes = sorted({r[0] for r in receptacles})
    otypes = sorted({kind for kind, _, _ in objects})
    decl = ["agent1 - agent"]
    decl += [f"{oid} - object" for _, oid, _ in objects]
    decl += [f"{t}Type - otype" for t in otypes]
    decl += [f"{rid} - receptacle" for rid in recep_ids.values()]
    decl += [f"{t}Type - rtype" for t in rtypes]
    decl += [f"{loc} - location" for loc in sorted({*loc_of.values(), start})]

    init = [f"(atLocation agent1 {start})"]
    for r, rid in recep_ids.items():
        init.append(f"(receptacleType {rid} {r[0]}Type)")
        init.append(f"(receptacleAtLocation {rid} {loc_of[r]})")
        if r[0] in aff.openable:
            init.append(f"(openable {rid})")
    for rt in rtypes:
        init += [f"(canContain {rt}Type {ot}Type)" for ot in otypes if ot in aff.can_contain[rt]]
    unary = (
        ("pickupable", aff.pickupable),
        ("isReceptacleObject", aff.receptacle_objects),
        ("cleanable", aff.cleanable),
        ("heatable", aff.heatable),
        ("coolable", aff.coolable),
        ("toggleable", aff.toggleable),
        ("sliceable", aff.sliceable),
    )
    for kind, oid, home in objects:
        init.append(f"(objectType {oid} {kind}Type)")
        init.append(f"(inReceptacle {oid} {recep_ids[home]})")
        init.append(f"(objectAtLocation {oid} {loc_of[home]})")
        init += [f"({name} {oid})" for name, kinds in unary if kind in kinds]
        if home[0] == "Fridge" and kind in aff.coolable:
            init.append(f"(isCool {oid})")  # the official games start fridge contents cold

    goal = goal_spec(spec.task_type)["pddl"].replace("#", "-")
    goal = goal.format(obj=spec.obj, recep=spec.recep, toggle=spec.toggle, mrecep="")
    lines = [f"(define (problem gen_{spec.task_type}_{spec.scene})", "(:domain alfred)", "(:objects"]
    lines += ["        " + d for d in decl] + ["        )", "(:init"]
    lines += ["        " + f for f in init] + ["        )"]
    return "\n".join(lines) + "\n" + goal


def make_game(spec: TaskSpec, problem: str, wording: str) -> dict[str, Any]:
    """The TextWorld PDDL game JSON (``solvable`` False until the planner has checked it)."""
    logic = game_logic(wording)
    return {
        "pddl_domain": logic.domain,
        "grammar": logic.grammar_for(spec.goal),
        "pddl_problem": problem,
        "solvable": False,
    }


def task_type_for(index: int, task_types: tuple[str, ...]) -> str:
    """Task ``index`` of a pool cycles through the requested types (every type appears)."""
    for t in task_types:
        if t not in TASK_TYPES:
            raise GenerationError(f"unknown task type {t!r}")
    return task_types[index % len(task_types)]
