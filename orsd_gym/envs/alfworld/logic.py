"""The ALFRED PDDL domain and TextWorld grammar shipped in the ``alfworld`` wheel, in either
action wording.

The wheel's grammar says ``move X to Y``; the official json_2.1.1 games (what papers evaluate
on) say ``put X in/on Y``, narrate moves as "You arrive at loc N.", have no ``help`` action and
let ``clean`` use a Sink as well as a SinkBasin. `game_logic("2.1.1")` rewrites the wheel's
files into exactly the domain and grammar of those games, so generated tasks and official games
share one vocabulary (tests check the equality against the official data).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from orsd_gym.errors import UnknownWordingError

WORDINGS = ("2.1.1", "wheel")
GOAL_PLACEHOLDER = "UNKNOWN GOAL"


@dataclass(frozen=True)
class GameLogic:
    """PDDL domain text and TextWorld grammar text (with the ``UNKNOWN GOAL`` placeholder)."""

    domain: str
    grammar: str

    def grammar_for(self, goal: str) -> str:
        """The grammar with the task sentence in place of the placeholder (as ALFWorld does)."""
        return self.grammar.replace(GOAL_PLACEHOLDER, goal)


def _wheel_file(name: str) -> str:
    return resources.files("alfworld").joinpath("data", name).read_text()


# (old, new) rewrites of the wheel grammar into the 2.1.1 one; each must apply exactly as often
# as listed, so a change in a future wheel fails loudly instead of producing a hybrid grammar.
_GRAMMAR_REWRITES = (
    (
        '"You arrive at {r.name}. #examineReceptacle.feedback#"',
        '"You arrive at {lend.name}. #examineReceptacle.feedback#"',
        1,
    ),
    ('"You move the {o.name} to the {r.name}."', '"You put the {o.name} in/on the {r.name}."', 1),
    ('template :: "move {o} to {r}";', 'template :: "put {o} in/on {r}";', 2),
)
_HELP_ACTION_GRAMMAR = re.compile(r"\n\naction help \{.*\n\}", re.S)
_HELP_ACTION_DOMAIN = re.compile(r"\(:action help\n.*?\n\)\n\n", re.S)
_SINK_COMMENTED = ";(receptacleType ?r SinkType)"


def _rewrite(text: str, old: str, new: str, count: int) -> str:
    found = text.count(old)
    if found != count:
        raise RuntimeError(f"alfworld wheel files changed: expected {count} x {old!r}, found {found}")
    return text.replace(old, new)


@cache
def game_logic(wording: str = "2.1.1") -> GameLogic:
    """The domain and grammar for ``wording`` ("2.1.1": official games; "wheel": as shipped)."""
    if wording not in WORDINGS:
        raise UnknownWordingError(f"wording={wording!r}; choose one of {WORDINGS}")
    domain, grammar = _wheel_file("alfred.pddl"), _wheel_file("alfred.twl2")
    if wording == "wheel":
        return GameLogic(domain, grammar)
    for old, new, count in _GRAMMAR_REWRITES:
        grammar = _rewrite(grammar, old, new, count)
    grammar, n_help = _HELP_ACTION_GRAMMAR.subn("", grammar)
    domain, n_help_domain = _HELP_ACTION_DOMAIN.subn("", domain)
    if (n_help, n_help_domain) != (1, 1):
        raise RuntimeError("alfworld wheel files changed: the 'help' action was not found once in each file")
    domain = _rewrite(domain, _SINK_COMMENTED, _SINK_COMMENTED[1:], 1)
    return GameLogic(domain, grammar)
