"""How ALFWorld is presented: its prompt, its rubric worked examples, its expert's criteria.

The expert's plan (``go to`` / ``take X from Y`` / ``put X in/on Y`` / ``heat|cool|clean X with
Y`` / ``use Y``) reads as criteria saying what to take and where from, what to heat, cool, clean
or use, where to put it, and one ordering criterion ("takes X before going to Y"); when the plan
has more milestones than allowed, the first take, the final put, the transformation and the
ordering are kept first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orsd_gym.envs.presentation import Criterion, DefaultPresentation, EnvPrompt, WorkedExample

_GO = re.compile(r"^go to (?P<place>.+)$")
_OPEN = re.compile(r"^open (?P<place>.+)$")
_TAKE = re.compile(r"^take (?P<thing>.+?) from (?P<place>.+)$")
_PUT = re.compile(r"^(?:put (?P<thing>.+?) in/on|move (?P<moved>.+?) to) (?P<place>.+)$")
_CHANGE = re.compile(r"^(?P<verb>heat|cool|clean) (?P<thing>.+?) with (?P<place>.+)$")
_USE = re.compile(r"^use (?P<place>.+)$")
_HEATING = re.compile(r"\b(?:heat|hot)\b", re.IGNORECASE)

ALFWORLD_PROMPT = EnvPrompt(
    "You are an agent in a household. Complete the task using text actions such as 'go to cabinet 1', "
    "'open drawer 2', 'take apple 1 from countertop 1', 'put apple 1 in/on fridge 1', 'heat X with microwave 1', "
    "'cool X with fridge 1', 'clean X with sinkbasin 1', 'use desklamp 1', 'look', 'inventory'.",
    noop_action="look",
)

#: Examples in order of preference; a proposal request gets the first whose task type differs
#: from the task at hand (`ALFWorldPresentation.rubric_example`). Their objects (a muffin, a
#: scarf) are outside ALFWorld's object types, so a criterion naming one is a copy. Short on
#: purpose: every token is paid for in each of the K proposals.
ALFWORLD_EXAMPLES = (
    WorkedExample(
        task_type="pick_heat_then_place_in_recep",
        task="heat some muffin and put it in diningtable.",
        attempts=(
            (
                "  1. > go to countertop 1\n     You arrive at countertop 1. On the countertop 1, you see a muffin 1.\n"
                "  2. > take muffin 1 from countertop 1\n     You pick up the muffin 1 from the countertop 1.\n"
                "  3. > go to microwave 1\n     You arrive at microwave 1. The microwave 1 is closed.\n"
                "  4. > heat muffin 1 with microwave 1"
            ),
            (
                "  1. > go to diningtable 1\n"
                "     You arrive at diningtable 1. On the diningtable 1, you see a fork 1.\n"
                "  2. > look\n     You are facing the diningtable 1.\n"
                "  3. > go to countertop 1"
            ),
        ),
        bundle=(
            "Takes the muffin 1 from countertop 1 before going anywhere else",
            "Heats the muffin 1 with microwave 1",
            "Puts the muffin 1 in/on diningtable 1 only after heating it",
            "Does not repeat look or go back and forth between places",
        ),
        thing="muffin",
    ),
    WorkedExample(
        task_type="pick_and_place_simple",
        task="put some scarf on bed.",
        attempts=(
            (
                "  1. > go to desk 1\n     You arrive at desk 1. On the desk 1, you see a scarf 1, and a pen 2.\n"
                "  2. > take scarf 1 from desk 1\n     You pick up the scarf 1 from the desk 1.\n"
                "  3. > go to bed 1"
            ),
            (
                "  1. > go to bed 1\n     You arrive at bed 1. On the bed 1, you see a pillow 1.\n"
                "  2. > take pillow 1 from bed 1\n     You pick up the pillow 1 from the bed 1.\n"
                "  3. > go to desk 1"
            ),
        ),
        bundle=(
            "Goes to desk 1, where the scarf 1 is, first",
            "Takes the scarf 1, not another object",
            "Goes to bed 1 while holding the scarf 1",
            "Puts the scarf 1 in/on bed 1",
        ),
        thing="scarf",
    ),
)


class ALFWorldPresentation(DefaultPresentation):
    """ALFWorld's presentation hooks (`orsd_gym.envs.presentation`), mixed into its env."""

    prompt = ALFWORLD_PROMPT
    rubric_examples = ALFWORLD_EXAMPLES

    @classmethod
    def rubric_example(cls, task: str, info: Mapping[str, Any]) -> WorkedExample | None:
        # Without attempts there is no reset info: a task that says "heat" or "hot" is of the
        # heating type, whose example would be copied.
        kind = info.get("task_type")
        if kind is None and _HEATING.search(task):
            kind = ALFWORLD_EXAMPLES[0].task_type
        return next(example for example in ALFWORLD_EXAMPLES if example.task_type != kind)

    @classmethod
    def expert_criteria(cls, actions: list[str], max_criteria: int) -> list[Criterion]:
        return alfworld_criteria(actions)

    @classmethod
    def state_key(cls, observation: str, info: Mapping[str, Any]) -> str:
        """The observation with the admissible actions the policy is shown beside it. ALFWorld's
        observation narrates what the last action did ("You arrive at countertop 1. On the
        countertop 1, you see ...", "Nothing happens."), not the state: it reads the same whatever
        the agent holds or has opened elsewhere, which the admissible actions (what can be taken,
        put, opened from here) tell apart (benchmarks/README.md, GiGPO's anchor states)."""
        return "\n".join([observation, *sorted(info.get("admissible_actions") or [])])


def alfworld_criteria(actions: list[str]) -> list[Criterion]:
    out: list[Criterion] = []
    takes = [i for i, a in enumerate(actions) if _TAKE.match(a)]
    puts = [i for i, a in enumerate(actions) if _PUT.match(a)]
    held: str | None = None
    for i, action in enumerate(actions):
        if match := _TAKE.match(action):
            held = match["thing"]
            out.append(Criterion(f"Takes the {held} from {match['place']}", i, 0 if i == takes[0] else 5))
        elif match := _PUT.match(action):
            out.append(
                Criterion(
                    f"Puts the {_put_things(actions, puts, i)} in/on {match['place']}", i, 1 if i == puts[-1] else 5
                )
            )
            held = None
        elif match := _CHANGE.match(action):
            out.append(Criterion(f"{match['verb'].capitalize()}s the {match['thing']} with {match['place']}", i, 2))
        elif match := _USE.match(action):
            holding = f" while holding the {held}" if held else ""
            out.append(Criterion(f"Uses the {match['place']}{holding}", i, 2))
        elif match := _OPEN.match(action):
            out.append(Criterion(f"Opens {match['place']}", i, 6))
    first_go = next((i for i, a in enumerate(actions) if _GO.match(a)), None)
    if first_go is not None and (not takes or first_go < takes[0]):
        out.append(Criterion(f"Goes to {_GO.match(actions[first_go])['place']} first", first_go, 4))
    if takes:
        thing = _TAKE.match(actions[takes[0]])["thing"]
        later_go = next((i for i in range(takes[0] + 1, len(actions)) if _GO.match(actions[i])), None)
        if later_go is not None:
            place = _GO.match(actions[later_go])["place"]
            out.append(Criterion(f"Takes the {thing} before going to {place}", later_go, 3))
    return out


def _put_things(actions: list[str], puts: list[int], index: int) -> str:
    """What the put at ``index`` places; the last of several puts into one place (two-object
    tasks) names every object put there, since it is the one that completes the task."""

    def thing_place(i: int) -> tuple[str, str]:
        match = _PUT.match(actions[i])
        return match["thing"] or match["moved"], match["place"]

    thing, place = thing_place(index)
    if index != puts[-1]:
        return thing
    things = list(dict.fromkeys(t for t, p in map(thing_place, puts) if p == place))
    return " and the ".join(things)
