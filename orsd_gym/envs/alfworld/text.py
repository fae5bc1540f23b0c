"""Observation clean-up shared by official and generated games."""

from __future__ import annotations

import re

_BANNER = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*")
# The 2.1.1 games narrate every move as "You arrive at loc 14. On the desk 1, ..."; the location
# number means nothing to an agent, so harnesses drop it.
_ARRIVE_AT_LOC = re.compile(r"You arrive at loc \d+\. ")


def clean_observation(text: str) -> str:
    """Drop the welcome banner and the "You arrive at loc N. " artifact."""
    return _ARRIVE_AT_LOC.sub("", _BANNER.sub("", text)).strip()


_GRAMMAR_TASK = re.compile(r'"rhs": "Your task is to: (.*?)\.?"')


def goal_from_grammar(grammar: str) -> str:
    """The goal sentence a game's grammar carries in its ``task`` rule."""
    match = _GRAMMAR_TASK.search(grammar)
    if match is None:
        raise ValueError("the game's grammar has no 'Your task is to:' rule")
    return match.group(1)
