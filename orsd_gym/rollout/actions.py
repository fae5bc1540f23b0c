"""Pluggable action extraction: model turn text -> the action string sent to the env.

A parser returns ``None`` when the turn has no parsable action; the collector then sends the
text as is or a no-op (``on_unparsable``) and records ``format_valid=False``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ActionParser:
    """A named extraction rule plus the instruction that tells the model the format."""

    name: str
    extract: Callable[[str], str | None]
    format_instructions: str
    #: Extra stop strings for sampling (the turn can end as soon as the action is complete).
    stop: tuple[str, ...] = ()


_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


def extract_tag(text: str) -> str | None:
    """The content of the last complete ``<action>...</action>`` tag (None if none or empty)."""
    found = [m.strip() for m in _TAG.findall(text)]
    found = [m for m in found if m]
    return found[-1] if found else None


def extract_last_line(text: str) -> str | None:
    """The last non-empty line (None for a blank turn)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else None


PARSERS: dict[str, ActionParser] = {
    "tag": ActionParser(
        "tag",
        extract_tag,
        "Think briefly if you need to, then give exactly one action inside <action>...</action> tags, "
        "for example <action>look</action>.",
        stop=("</action>",),
    ),
    "last_line": ActionParser(
        "last_line",
        extract_last_line,
        "Think briefly if you need to, then write exactly one action alone on the last line.",
    ),
}


def get_parser(name_or_parser: str | ActionParser) -> ActionParser:
    if isinstance(name_or_parser, ActionParser):
        return name_or_parser
    if name_or_parser not in PARSERS:
        raise ValueError(f"action_format={name_or_parser!r}; choose one of {sorted(PARSERS)} or pass an ActionParser")
    return PARSERS[name_or_parser]


@dataclass(frozen=True)
class ParsedAction:
    action: str
    format_valid: bool


def choose_action(text: str, parser: ActionParser, on_unparsable: str, noop_action: str) -> ParsedAction:
    """Apply ``parser``; an unparsable turn is sent ``"as_is"`` (stripped text) or as ``"noop"``."""
    action = parser.extract(text)
    if action is not None:
        return ParsedAction(action, True)
    if on_unparsable == "as_is":
        return ParsedAction(text.strip(), False)
    if on_unparsable == "noop":
        return ParsedAction(noop_action, False)
    raise ValueError(f"on_unparsable={on_unparsable!r}; choose 'as_is' or 'noop'")
