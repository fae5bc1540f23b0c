"""Prefix caches of the transformers backend: what `HFPolicy.generate` keeps and reuses.

* `KVSession`: the keys/values of one episode's token prefix, kept between calls (a turn then
  encodes only the tokens added since the previous one).
* `shared_prefix_groups`: rows of one call that share a prefix (the G attempts of a GRPO group
  start from the same prompt, ORSD's K proposals from the same proposal prompt), so that the
  prefix is encoded once and every row starts from a copy.
* `batch_cache` / `store_sessions`: the batch cache a call decodes in, built from those sources,
  and the sessions written back from it. The batch cache reserves room for the tokens the call
  may generate, so a decode step writes its token in place: a growing cache would reallocate and
  copy every layer's keys and values at every step.

Layout. Row ``i`` of a batch cache holds its ``reuse[i]`` cached tokens right-aligned at
``cached`` (``[left pad | cached prefix]``); the attention mask masks the pads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

#: Shorter common prefixes are not worth a forward pass of their own.
MIN_SHARED_PREFIX = 16


@dataclass
class KVSession:
    """Keys/values of one token prefix, kept between calls to `HFPolicy.generate`.

    ``token_ids`` are the tokens whose keys/values ``layers`` holds (one ``(key, value)`` pair of
    shape ``[1, kv_heads, len(token_ids), head_dim]`` per layer). A call reuses the longest
    common prefix of ``token_ids`` and the new context, so a session is never *wrong*, only
    more or less useful.
    """

    token_ids: list[int] = field(default_factory=list)
    layers: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def clear(self) -> None:
        self.token_ids = []
        self.layers = None

    def nbytes(self) -> int:
        """The bytes its keys and values hold."""
        return sum(t.numel() * t.element_size() for pair in self.layers or () for t in pair)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def shared_prefix_groups(contexts: Sequence[Sequence[int]], candidates: Sequence[int]) -> list[tuple[list[int], int]]:
    """Groups of ``candidates`` whose common prefix is encoded once, with its length (each row
    keeps at least one token to feed), chosen to save the most tokens.

    Sorted contexts put rows with long common prefixes next to each other (a run's common prefix
    is the shortest link between neighbours); a run is kept whole or split at its shortest
    link, whichever saves more: a batch of tasks shares the system prompt, each task's group
    its whole prompt, and the groups win.
    """
    order = sorted(candidates, key=lambda i: contexts[i])
    links = [common_prefix(contexts[a], contexts[b]) for a, b in zip(order, order[1:], strict=False)]

    def best(lo: int, hi: int) -> tuple[int, list[tuple[list[int], int]]]:  # rows order[lo:hi]
        if hi - lo < 2:
            return 0, []
        run_links = links[lo : hi - 1]
        cut = lo + 1 + run_links.index(min(run_links))
        left_saved, left = best(lo, cut)
        right_saved, right = best(cut, hi)
        shared = min(min(run_links), *(len(contexts[i]) - 1 for i in order[lo:hi]))
        whole = (hi - lo - 1) * shared if shared >= MIN_SHARED_PREFIX else 0
        if whole > 0 and whole >= left_saved + right_saved:
            return whole, [(order[lo:hi], shared)]
        return left_saved + right_saved, left + right

    return best(0, len(order))[1]


class ReservedLayer(DynamicLayer):
    """A cache layer whose keys/values live in a buffer of ``capacity`` positions: `update`
    writes into it (reallocating only if it runs out) and returns views of the filled part."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None

    def reserve(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Take ``keys``/``values`` (whose first ``length`` positions are filled) as the buffers."""
        self.key_buffer, self.value_buffer, self.length = keys, values, length
        self.device = keys.device
        self.is_initialized = True
        self._expose()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        if self.key_buffer is None or self.length + n > self.key_buffer.shape[-2]:
            self._grow(key_states, value_states, max(self.capacity, 2 * (self.length + n)))
        assert self.key_buffer is not None and self.value_buffer is not None
        self.key_buffer[:, :, self.length : self.length + n] = key_states
        self.value_buffer[:, :, self.length : self.length + n] = value_states
        self.length += n
        self._expose()
        return self.keys, self.values

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, capacity: int) -> None:
        batch, heads, _, dim = key_states.shape
        keys = key_states.new_empty(batch, heads, capacity, dim)
        values = value_states.new_empty(batch, heads, capacity, value_states.shape[-1])
        if self.key_buffer is not None and self.value_buffer is not None:
            keys[:, :, : self.length] = self.key_buffer[:, :, : self.length]
            values[:, :, : self.length] = self.value_buffer[:, :, : self.length]
        self.reserve(keys, values, self.length)

    def _expose(self) -> None:
        assert self.key_buffer is not None and self.value_buffer is not None
        self.keys = self.key_buffer[:, :, : self.length]
        self.values = self.value_buffer[:, :, : self.length]


def batch_cache(
    sources: Sequence[KVSession | None], reuse: Sequence[int], cached: int, num_layers: int, room: int
) -> DynamicCache:
    """A cache for ``len(reuse)`` rows, row ``i`` holding the first ``reuse[i]`` tokens of
    ``sources[i]`` right-aligned at ``cached``, with room for ``room`` more tokens per row."""
    cache = DynamicCache()
    cache.layers = [ReservedLayer(cached + room) for _ in range(num_layers)]
    if cached == 0:
        return cache
    donor = next(s.layers for s, r in zip(sources, reuse, strict=True) if r > 0 and s is not None)
    for index, (layer, (key0, value0)) in enumerate(zip(cache.layers, donor, strict=True)):
        shape = (len(reuse), key0.shape[1], cached + room, key0.shape[3])
        keys = torch.zeros(shape, dtype=key0.dtype, device=key0.device)
        values = torch.zeros(shape, dtype=value0.dtype, device=value0.device)
        for i, (source, r) in enumerate(zip(sources, reuse, strict=True)):
            if r > 0 and source is not None:
                assert source.layers is not None
                keys[i, :, cached - r : cached] = source.layers[index][0][0, :, :r]
                values[i, :, cached - r : cached] = source.layers[index][1][0, :, :r]
        layer.reserve(keys, values, cached)
    return cache


def keep_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keep only batch rows ``rows`` (an index tensor) of a `batch_cache`, in that order, with
    the room it had left: later steps then compute nothing for the rows dropped."""
    for layer in cache.layers:
        assert isinstance(layer, ReservedLayer) and layer.key_buffer is not None and layer.value_buffer is not None
        layer.reserve(layer.key_buffer.index_select(0, rows), layer.value_buffer.index_select(0, rows), layer.length)


def write_suffixes(
    cache: DynamicCache, batch: int, rows: Sequence[int], part: DynamicCache, lengths: Sequence[int], end: int
) -> None:
    """Copy into rows ``rows`` of ``cache`` (a `batch_cache` of ``batch`` rows) the last
    ``lengths[j]`` positions of row ``j`` of ``part`` (a cache of those rows, in that order),
    right-aligned at ``end``; ``cache`` then holds ``end`` positions (a row's positions before
    its own are pads, masked)."""
    for layer, piece in zip(cache.layers, part.layers, strict=True):
        assert isinstance(layer, ReservedLayer) and isinstance(piece, ReservedLayer)
        if layer.key_buffer is None:  # nothing was cached before this call: the batch's buffers
            _, heads, _, dim = piece.keys.shape
            layer.reserve(
                piece.keys.new_zeros(batch, heads, layer.capacity, dim),
                piece.values.new_zeros(batch, heads, layer.capacity, piece.values.shape[-1]),
                0,
            )
        assert layer.key_buffer is not None and layer.value_buffer is not None
        for j, (i, n) in enumerate(zip(rows, lengths, strict=True)):
            layer.key_buffer[i, :, end - n : end] = piece.keys[j, :, piece.length - n :]
            layer.value_buffer[i, :, end - n : end] = piece.values[j, :, piece.length - n :]
        layer.length = end
        layer._expose()


def store_sessions(
    sessions: Sequence[KVSession],
    cache: DynamicCache,
    mask: torch.Tensor,
    tokens: Sequence[list[int]],
    rows: Sequence[int] | None = None,
) -> None:
    """Write row ``rows[j]`` (None: row ``j``) of ``cache`` (its mask-1 positions, which hold
    ``tokens[j]``) to ``sessions[j]``."""
    layers = [(layer.keys, layer.values) for layer in cache.layers]
    for j, session in enumerate(sessions):
        i = j if rows is None else rows[j]
        keep = mask[i].nonzero().squeeze(-1)
        if keep.numel() != len(tokens[j]):  # never expected; a stale session is just dropped
            session.clear()
            continue
        session.token_ids = tokens[j]
        session.layers = [(k[i : i + 1, :, keep].clone(), v[i : i + 1, :, keep].clone()) for k, v in layers]
