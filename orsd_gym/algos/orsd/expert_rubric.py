"""Rubric bundles written from an env's expert plan: the positive control of ORSD.

A bundle made here is known to describe a right way of solving the task, because it restates
the privileged plan the env's expert computes at the task's start (``info["expert_actions"]`` of
the reset info; make the env with ``expert=True`` or ``expert="reset"``). No real run has such
information; it exists to show what ORSD's credit assignment does with a rubric that is right.

Criteria are short, yes/no checkable statements about the process that name the task's objects
and places, so they can only help on the task they were written for:

* ALFWorld (``go to`` / ``take X from Y`` / ``put X in/on Y`` / ``heat|cool|clean X with Y`` /
  ``use Y``): what to take and where from, what to heat/cool/clean/use, where to put it, and one
  ordering criterion ("takes X before going to Y");
* WebShop (``search[...]`` / ``click[...]``): what to search for, which product to open (and on
  which results page), which options to select, buying it after the options;
* any other env: some of the plan's actions themselves, and their order.

When a plan has more milestones than ``max_criteria``, the most telling ones are kept (for
ALFWorld: the first take, the final put, the transformation, the ordering), in plan order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orsd_gym.envs.base import EXPERT_ACTIONS
from orsd_gym.errors import MissingExpertPlanError
from orsd_gym.rollout.trajectory import Trajectory

_GO = re.compile(r"^go to (?P<place>.+)$")
_OPEN = re.compile(r"^open (?P<place>.+)$")
_TAKE = re.compile(r"^take (?P<thing>.+?) from (?P<place>.+)$")
_PUT = re.compile(r"^(?:put (?P<thing>.+?) in/on|move (?P<moved>.+?) to) (?P<place>.+)$")
_CHANGE = re.compile(r"^(?P<verb>heat|cool|clean) (?P<thing>.+?) with (?P<place>.+)$")
_USE = re.compile(r"^use (?P<place>.+)$")
_WEB_ACTION = re.compile(r"^(?P<kind>search|click)\[(?P<argument>.*)\]$")
#: WebShop buttons (clicked text, lower-cased) that move between pages rather than choose something.
_WEB_NAVIGATION = frozenset({"next >", "< prev", "back to search", "description", "features", "reviews"})
_WEB_BUY = "buy now"
#: Words of the search query quoted in a WebShop criterion (the expert searches the whole instruction).
_QUERY_WORDS = 8


@dataclass(frozen=True)
class _Criterion:
    text: str
    #: Plan index the criterion is about (output order).
    position: int
    #: Lower is kept first when a plan has more criteria than allowed.
    priority: int


def expert_bundle(task: str, plan: Sequence[str], max_criteria: int) -> list[str]:
    """At most ``max_criteria`` process criteria restating the expert ``plan`` for ``task``.

    ``plan`` is the expert's actions from the task's start. An empty plan gives no criteria
    (the task is solved at reset, or the env's expert has nothing to say).
    """
    if max_criteria < 1:
        raise ValueError(f"max_criteria must be >= 1, got {max_criteria}")
    actions = [" ".join(str(a).split()) for a in plan if str(a).strip()]
    if not actions:
        return []
    if any(_WEB_ACTION.match(a) for a in actions):
        candidates = _webshop_criteria(actions)
    elif any(_TAKE.match(a) or _PUT.match(a) or _USE.match(a) for a in actions):
        candidates = _alfworld_criteria(actions)
    else:
        candidates = _generic_criteria(actions, max_criteria)
    kept = sorted(candidates, key=lambda c: (c.priority, c.position))[:max_criteria]
    texts = [c.text for c in sorted(kept, key=lambda c: (c.position, c.priority))]
    return list(dict.fromkeys(texts))


def expert_bundle_for(trajectory: Trajectory, max_criteria: int) -> list[str]:
    """`expert_bundle` from the plan in a trajectory's reset info (``infos[0]``)."""
    first = trajectory.infos[0] if trajectory.infos else {}
    if EXPERT_ACTIONS not in first:
        raise MissingExpertPlanError(
            f"trajectory of task {trajectory.task_id} ({trajectory.env_id}) has no info['{EXPERT_ACTIONS}'] at "
            "reset; make the env with expert=True or expert='reset' (e.g. env.kwargs.expert: reset)"
        )
    return expert_bundle(trajectory.task, first[EXPERT_ACTIONS], max_criteria)


def _alfworld_criteria(actions: list[str]) -> list[_Criterion]:
    out: list[_Criterion] = []
    takes = [i for i, a in enumerate(actions) if _TAKE.match(a)]
    puts = [i for i, a in enumerate(actions) if _PUT.match(a)]
    held: str | None = None
    for i, action in enumerate(actions):
        if match := _TAKE.match(action):
            held = match["thing"]
            out.append(_Criterion(f"Takes the {held} from {match['place']}", i, 0 if i == takes[0] else 5))
        elif match := _PUT.match(action):
            out.append(
                _Criterion(
                    f"Puts the {_put_things(actions, puts, i)} in/on {match['place']}", i, 1 if i == puts[-1] else 5
                )
            )
            held = None
        elif match := _CHANGE.match(action):
            out.append(_Criterion(f"{match['verb'].capitalize()}s the {match['thing']} with {match['place']}", i, 2))
        elif match := _USE.match(action):
            holding = f" while holding the {held}" if held else ""
            out.append(_Criterion(f"Uses the {match['place']}{holding}", i, 2))
        elif match := _OPEN.match(action):
            out.append(_Criterion(f"Opens {match['place']}", i, 6))
    first_go = next((i for i, a in enumerate(actions) if _GO.match(a)), None)
    if first_go is not None and (not takes or first_go < takes[0]):
        out.append(_Criterion(f"Goes to {_GO.match(actions[first_go])['place']} first", first_go, 4))
    if takes:
        thing = _TAKE.match(actions[takes[0]])["thing"]
        later_go = next((i for i in range(takes[0] + 1, len(actions)) if _GO.match(actions[i])), None)
        if later_go is not None:
            place = _GO.match(actions[later_go])["place"]
            out.append(_Criterion(f"Takes the {thing} before going to {place}", later_go, 3))
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


def _webshop_criteria(actions: list[str]) -> list[_Criterion]:
    out: list[_Criterion] = []
    product_at: int | None = None
    result_page = 1
    options: list[tuple[int, str]] = []
    for i, action in enumerate(actions):
        match = _WEB_ACTION.match(action)
        if match is None:
            continue
        argument = match["argument"]
        if match["kind"] == "search":
            words = argument.split()
            quoted = " ".join(words[:_QUERY_WORDS]) + (" ..." if len(words) > _QUERY_WORDS else "")
            out.append(_Criterion(f'Searches for "{quoted}"', i, 2))
            product_at, result_page, options = None, 1, []
        elif argument in _WEB_NAVIGATION:
            result_page += {"next >": 1, "< prev": -1}.get(argument, 0)
        elif argument == _WEB_BUY:
            after = " after selecting its options" if options else ""
            out.append(_Criterion(f"Buys the product it opened{after}", i, 3))
        elif product_at is None:
            product_at = i
            where = f" (on results page {result_page})" if result_page > 1 else ""
            out.append(_Criterion(f"Opens product {argument.upper()}{where}", i, 0))
        else:
            options.append((i, argument))
    if options:
        values = ", ".join(value for _, value in options)
        out.append(_Criterion(f"Selects the options {values}", options[0][0], 1))
    return out


def _generic_criteria(actions: list[str], max_criteria: int) -> list[_Criterion]:
    # Evenly spaced actions from first to last (the last one usually completes the task) and,
    # given three criteria or more, the order of the first and the last.
    distinct = list(dict.fromkeys(actions))
    if len(distinct) <= max_criteria:
        return [_Criterion(f'Does "{a}"', actions.index(a), 0) for a in distinct]
    count = max_criteria - 1 if max_criteria >= 3 else max_criteria
    picks = [len(distinct) - 1] if count == 1 else [round(k * (len(distinct) - 1) / (count - 1)) for k in range(count)]
    out = [_Criterion(f'Does "{distinct[p]}"', actions.index(distinct[p]), 0) for p in picks]
    if max_criteria >= 3:
        out.append(_Criterion(f'Does "{distinct[picks[0]]}" before "{distinct[picks[-1]]}"', len(actions), 1))
    return out
