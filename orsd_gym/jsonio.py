"""Strict JSON: what the toolkit writes parses with any JSON parser.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which are not JSON (a strict
parser, e.g. JavaScript's ``JSON.parse``, rejects the whole file). A number that does not exist
(an interval from one seed, a metric not measured) is written as ``null``; numpy and torch
scalars as plain numbers.
"""

from __future__ import annotations

import json
import math
from typing import Any


def strict(value: Any) -> Any:
    """A copy of ``value`` that `json.dumps` writes as strict JSON (non-finite floats -> None)."""
    if isinstance(value, dict):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):
        return strict(value.item())
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `strict` ``value``; refuses anything that would not be strict JSON."""
    return json.dumps(strict(value), allow_nan=False, **kwargs)
