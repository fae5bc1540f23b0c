"""Pluggable action extraction: model turn text -> the action string sent to the env.

A parser returns ``None`` when the turn has no parsable action; the collector then sends the
text as is or a no-op (``on_unparsable``) and records ``format_valid=False``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ActionParser:
    """A named extraction rule plus the instruction that tells the model the format."""

    name: str
    extract: Callable[[str], str | None]
    format_instructions: str
    #: Extra stop strings for sampling (the turn can end as soon as the action is complete).
    stop: tuple[str, ...] = ()
    #: Optional second stage that maps the extracted text onto the env's admissible actions
    #: (given the text and the admissible list; returns None when nothing matches).
    resolve: Callable[[str, Sequence[str]], str | None] | None = None
    #: The prompt shows the admissible actions as a numbered list (see `EnvPrompt.numbered`).
    numbered_choices: bool = False


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


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def match_admissible(text: str, admissible: Sequence[str], *, min_ratio: float = 0.6) -> str | None:
    """The admissible action ``text`` means: an exact match, else the longest admissible action
    quoted inside it, else the closest one by edit similarity (>= ``min_ratio``); None if none.

    Small models rarely reproduce an action verbatim ("I will go to shelf 1."); mapping their
    text onto the legal actions, as classic ALFWorld agents do, keeps exploration meaningful.
    """
    if not admissible:
        return None
    wanted = _normalise(text)
    by_norm = {_normalise(a): a for a in admissible}
    if wanted in by_norm:
        return by_norm[wanted]
    quoted = [norm for norm in by_norm if re.search(rf"(?<!\w){re.escape(norm)}(?!\w)", wanted)]
    if quoted:
        return by_norm[max(quoted, key=len)]
    scored = [(difflib.SequenceMatcher(None, wanted, norm).ratio(), norm) for norm in by_norm]
    ratio, best = max(scored)
    return by_norm[best] if ratio >= min_ratio else None


_CHOICE_NUMBER = re.compile(r"^\s*(\d+)\s*[.):]?(?:\s+|$)(.*)$", re.DOTALL)


def _resolve_admissible(text: str, admissible: Sequence[str]) -> str | None:
    """Text naming an admissible action wins; otherwise a leading list number ("3", "3. ...")
    picks that choice of the numbered list."""
    candidate = extract_tag(text) or text
    number = _CHOICE_NUMBER.match(candidate)
    rest = number.group(2) if number is not None else candidate
    matched = match_admissible(rest, admissible) if rest.strip() else None
    if matched is not None or number is None:
        return matched
    index = int(number.group(1)) - 1
    return admissible[index] if 0 <= index < len(admissible) else None


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
    "admissible": ActionParser(
        "admissible",
        extract_last_line,
        "Each turn, choose the next action from the numbered list and reply with that action only.",
        stop=("\n",),
        resolve=_resolve_admissible,
        numbered_choices=True,
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


def choose_action(
    text: str, parser: ActionParser, on_unparsable: str, noop_action: str, admissible: Sequence[str] = ()
) -> ParsedAction:
    """Apply ``parser``; an unparsable turn is sent ``"as_is"`` (stripped text) or as ``"noop"``.

    A parser with a ``resolve`` stage maps the turn onto ``admissible`` when the env lists its
    legal actions (and falls back to plain extraction when it does not).
    """
    if parser.resolve is not None and admissible:
        action = parser.resolve(text, admissible)
    else:
        action = parser.extract(text)
    if action is not None:
        return ParsedAction(action, True)
    if on_unparsable == "as_is":
        return ParsedAction(text.strip(), False)
    if on_unparsable == "noop":
        return ParsedAction(noop_action, False)
    raise ValueError(f"on_unparsable={on_unparsable!r}; choose 'as_is' or 'noop'")
