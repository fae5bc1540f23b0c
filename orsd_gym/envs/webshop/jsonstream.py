"""Streaming readers for WebShop's big JSON files, on `ijson` (its C backend, yajl2_c).

The full catalog (``items_shuffle.json``, 1.18M products) is one JSON array of several GB and
``items_ins_v2.json`` one JSON object keyed by ASIN. ``json.load`` would hold the whole parsed
file (and its text) at once; these readers build one element at a time from a bounded read
buffer, so peak memory is one buffer plus one record (benchmarks/perf/webshop_json_loading.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import ijson

from orsd_gym.errors import JSONStreamError

DEFAULT_CHUNK_CHARS = 1 << 16
_WHITESPACE = b" \t\n\r"


def _expect_top_level(handle: IO[bytes], path: Path, opening: bytes) -> None:
    """Fail unless the file's first non-whitespace byte is ``opening``: ijson's prefix queries
    would silently yield nothing for a file of the other shape."""
    while (byte := handle.read(1)) and byte in _WHITESPACE:
        pass
    if byte != opening:
        found = byte.decode("utf-8", "replace") or "end of file"
        raise JSONStreamError(f"{path}: expected {opening.decode()!r} but found {found!r}")
    handle.seek(0)


def _stream_error(path: Path, error: ijson.JSONError) -> JSONStreamError:
    # yajl's message is several lines (the text around the error and a caret); its first line says what failed.
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return JSONStreamError(f"{path}: invalid JSON: {reason}")


def iter_json_array(path: str | Path, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[Any]:
    """Yield the elements of a file holding one top-level JSON array.

    Numbers come back as ``json`` gives them (int, float; not ijson's default Decimal).
    ``chunk_chars`` is the read size in bytes.
    """
    yield from _streamed(
        Path(path), b"[", lambda handle: ijson.items(handle, "item", use_float=True, buf_size=chunk_chars)
    )


def iter_json_object(path: str | Path, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[tuple[str, Any]]:
    """Yield the ``(key, value)`` pairs of a file holding one top-level JSON object (numbers as in
    `iter_json_array`)."""
    yield from _streamed(
        Path(path), b"{", lambda handle: ijson.kvitems(handle, "", use_float=True, buf_size=chunk_chars)
    )


def _streamed(path: Path, opening: bytes, read: Callable[[IO[bytes]], Iterator[Any]]) -> Iterator[Any]:
    """What ``read`` streams from ``path``, whose top level must open with ``opening``; a
    malformed file raises its one-line error, naming the file."""
    with path.open("rb") as handle:
        _expect_top_level(handle, path, opening)
        try:
            yield from read(handle)
        except ijson.JSONError as error:
            raise _stream_error(path, error) from error
