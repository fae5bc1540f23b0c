"""The hand-written streaming JSON reader that orsd_gym/envs/webshop/jsonstream.py used before it
moved to `ijson` (commit 81a5826), kept as the baseline of benchmarks/perf/webshop_json_loading.py.

The full catalog (``items_shuffle.json``, 1.18M products) is one JSON array of several GB and
``items_ins_v2.json`` one JSON object keyed by ASIN. ``json.load`` would hold the whole parsed
file (and its text) at once; these readers decode one element at a time from a bounded text
buffer with `json.JSONDecoder.raw_decode`, so peak memory is one chunk plus one record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orsd_gym.errors import JSONStreamError

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"
_NUMBER_START = frozenset("-0123456789")
_NUMBER_CHARS = frozenset("-+.eE0123456789")
DEFAULT_CHUNK_CHARS = 1 << 20


class _Buffer:
    """A text window over a file that refills on demand."""

    def __init__(self, handle, path: Path, chunk_chars: int) -> None:
        self.handle = handle
        self.path = path
        self.chunk_chars = chunk_chars
        self.text = ""
        self.pos = 0
        self.eof = False

    def _refill(self) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(self.chunk_chars)
        if not chunk:
            self.eof = True
            return False
        self.text = self.text[self.pos :] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-whitespace character ('' at end of file), without consuming it."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self._refill():
                return ""

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            raise JSONStreamError(f"{self.path}: expected {char!r} but found {found or 'end of file'!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode one JSON value, reading more of the file until it is complete."""
        self.peek()
        while True:
            # A number cut at the chunk edge ("12" of "12.5") would decode short, so make sure
            # a number's characters end inside the buffer first.
            if self.text[self.pos : self.pos + 1] in _NUMBER_START:
                end = self.pos
                while end < len(self.text) and self.text[end] in _NUMBER_CHARS:
                    end += 1
                if end == len(self.text) and self._refill():
                    continue
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as error:
                # An incomplete value fails to decode; more text may complete it.
                if self._refill():
                    continue
                raise JSONStreamError(f"{self.path}: invalid JSON near character {error.pos}: {error.msg}") from error
            self.pos = end
            return value


def _elements(buffer: _Buffer, close: str) -> Iterator[None]:
    """Yield once per element position of a JSON array/object (after the opening bracket)."""
    if buffer.peek() == close:
        buffer.pos += 1
        return
    while True:
        yield None
        separator = buffer.peek()
        buffer.pos += 1
        if separator == close:
            return
        if separator != ",":
            raise JSONStreamError(f"{buffer.path}: expected ',' or {close!r} but found {separator or 'end of file'!r}")


def iter_json_array(path: str | Path, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[Any]:
    """Yield the elements of a file holding one top-level JSON array."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        buffer = _Buffer(handle, path, chunk_chars)
        buffer.expect("[")
        for _ in _elements(buffer, "]"):
            yield buffer.value()


def iter_json_object(path: str | Path, chunk_chars: int = DEFAULT_CHUNK_CHARS) -> Iterator[tuple[str, Any]]:
    """Yield the ``(key, value)`` pairs of a file holding one top-level JSON object."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        buffer = _Buffer(handle, path, chunk_chars)
        buffer.expect("{")
        for _ in _elements(buffer, "}"):
            key = buffer.value()
            if not isinstance(key, str):
                raise JSONStreamError(f"{path}: object key {key!r} is not a string")
            buffer.expect(":")
            yield key, buffer.value()
