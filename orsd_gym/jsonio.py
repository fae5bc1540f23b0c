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

import numpy as np


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


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy of an info value (numpy scalars/arrays become Python values)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
