"""A `gymnasium.spaces.Text` that admits real-world text.

Gymnasium's `Text` space checks membership character by character against a fixed charset.
Real observations contain newlines, punctuation and non-ASCII product names (``é``, ``™``,
``×``), and enumerating all of Unicode as a charset would cost hundreds of MB. `UnicodeText`
keeps a small printable charset for *sampling* (so `sample()` and `check_env` work) but accepts
as a member any string without control characters other than ``\\n``, ``\\r`` and ``\\t``
(and without lone surrogates, which UTF-8 cannot carry). Spaces and invisible format
characters that Python does not call printable (no-break space, zero-width joiner, soft
hyphen) are members: product text is full of them, and an env must show it as it is.

It also teaches Gymnasium's async vector env to move these strings through shared memory as
UTF-8 bytes, since the stock Text shared-memory codec can only encode charset characters.
"""

from __future__ import annotations

import multiprocessing as mp
import string
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import shared_memory as _shm

#: Characters `sample()` draws from: printable ASCII plus a few common non-ASCII letters.
SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n" + "éü×™"
_CONTROL_OK = frozenset("\n\r\t")
_EXCLUDED_CATEGORIES = frozenset({"Cc", "Cs"})  # control characters, surrogates


def is_text_character(char: str) -> bool:
    """Whether ``char`` may appear in a `UnicodeText` member."""
    return char in _CONTROL_OK or unicodedata.category(char) not in _EXCLUDED_CATEGORIES


def drop_non_text_characters(text: str) -> str:
    """``text`` without the characters a `UnicodeText` member may not hold."""
    if text.isprintable():
        return text
    return "".join(c for c in text if is_text_character(c))


class UnicodeText(Text):
    """Text space whose members are strings of Unicode text: no control characters but newlines and tabs."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length=max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str) or not self.min_length <= len(x) <= self.max_length:
            return False
        return x.isprintable() or all(is_text_character(c) for c in x)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


# --- shared memory codec for AsyncVectorEnv ---------------------------------------------------
# Each env owns a slot of `_LEN_BYTES` (an int64 byte count) + 4 * max_length bytes (UTF-8 never
# needs more). AsyncVectorEnv reads its observation buffer *once* at start-up and deep-copies it
# on every reset/step, exactly as it does with numpy views of shared memory, so the reader
# returns a live view whose deep copy decodes the current contents.
_LEN_BYTES = 8


def _slot_bytes(space: UnicodeText) -> int:
    return _LEN_BYTES + 4 * space.max_length


class SharedTextBatch(Sequence):
    """Live, read-only view of the texts in an AsyncVectorEnv's shared observation buffer."""

    def __init__(self, shared_memory: Any, n: int, slot: int) -> None:
        self._buffer = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)
        self._n = n
        self._slot = slot

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError(index)
        start = (index % self._n) * self._slot
        length = int(self._buffer[start : start + _LEN_BYTES].view(np.int64)[0])
        return self._buffer[start + _LEN_BYTES : start + _LEN_BYTES + length].tobytes().decode("utf-8")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"SharedTextBatch({tuple(self)!r})"


@_shm.create_shared_memory.register(UnicodeText)
def _create_unicode_text_shared_memory(space: UnicodeText, n: int = 1, ctx: Any = mp):
    return ctx.Array("B", n * _slot_bytes(space))


@_shm.read_from_shared_memory.register(UnicodeText)
def _read_unicode_text_from_shared_memory(space: UnicodeText, shared_memory: Any, n: int = 1):
    return SharedTextBatch(shared_memory, n, _slot_bytes(space))


@_shm.write_to_shared_memory.register(UnicodeText)
def _write_unicode_text_to_shared_memory(space: UnicodeText, index: int, value: str, shared_memory: Any):
    slot = _slot_bytes(space)
    encoded = value.encode("utf-8")[: slot - _LEN_BYTES]
    buffer = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)
    start = index * slot
    buffer[start : start + _LEN_BYTES] = np.frombuffer(np.int64(len(encoded)).tobytes(), dtype=np.uint8)
    buffer[start + _LEN_BYTES : start + _LEN_BYTES + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
