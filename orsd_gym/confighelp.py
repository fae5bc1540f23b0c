"""Help text of config fields, read from the ``#:`` comments written above them in the source
(the convention Sphinx's autodoc reads), so the help a user reads with ``orsd-gym config
explain`` is the comment a contributor edits. A ``#:`` comment documents the one field below it;
a field's help from a base class carries over."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import textwrap
import typing
from typing import Any

_FIELD = re.compile(r"\s+(\w+)\s*:\s*\S")


@functools.cache
def field_help(cls: type) -> dict[str, str]:
    """``{field name: help}`` for every field of dataclass ``cls`` that has a ``#:`` comment."""
    helps: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            helps.update(_comments(klass))
    return helps


def _comments(cls: type) -> dict[str, str]:
    found: dict[str, str] = {}
    comment: list[str] = []
    for line in inspect.getsource(cls).splitlines()[1:]:
        text = line.strip()
        if text.startswith("#:"):
            comment.append(text[2:].strip())
            continue
        match = _FIELD.match(line)
        if match and comment and not text.startswith(("def ", "return ", "#")):
            found[match.group(1)] = " ".join(comment)
        comment = []
    return found


def missing_help(cls: type) -> list[str]:
    """Fields of ``cls`` and of the dataclasses nested in it that have no help, as dotted keys."""
    helps = field_help(cls)
    missing = []
    for item in dataclasses.fields(cls):
        if not helps.get(item.name):
            missing.append(item.name)
        nested = _dataclass_of(cls, item.name)
        if nested is not None:
            missing.extend(f"{item.name}.{key}" for key in missing_help(nested))
    return missing


def _dataclass_of(cls: type, name: str) -> type | None:
    annotation = typing.get_type_hints(cls)[name]
    return annotation if dataclasses.is_dataclass(annotation) else None


def describe(cls: type, value: Any, prefix: str) -> str:
    """Every field of section ``cls`` (its current ``value``): a line ``key = value``, then its
    whole help, wrapped and indented (a first sentence alone would stop at "e.g.")."""
    helps = field_help(cls)
    blocks = []
    for item in dataclasses.fields(cls):
        line = f"{prefix}{item.name} = {getattr(value, item.name)!r}"
        help_text = helps.get(item.name)
        blocks.append(line + ("\n" + _wrapped(help_text) if help_text else ""))
    return "\n".join(blocks)


def _wrapped(text: str) -> str:
    return textwrap.fill(text, width=96, initial_indent="  ", subsequent_indent="  ")


def explain_field(cls: type, name: str, value: Any, key: str) -> str:
    """One field: key, current value, type and default, and its whole help, wrapped."""
    item = next(f for f in dataclasses.fields(cls) if f.name == name)
    default = item.default if item.default is not dataclasses.MISSING else item.default_factory()  # type: ignore[misc]
    kind = typing.get_type_hints(cls)[name]
    kind_text = kind.__name__ if isinstance(kind, type) else str(kind).replace("typing.", "")
    help_text = field_help(cls).get(name, "(no help written)")
    return f"{key} = {value!r}\n  type: {kind_text}; default: {default!r}\n{_wrapped(help_text)}"
