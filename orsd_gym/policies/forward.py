"""`CachedForward`: a causal LM's decoder and LM head run over padded rows, with prefix caches.

Batched layout. Each row of a batch is ``[left pad | cached prefix | pad | new suffix]`` in one
2-D attention mask; pads are masked out and position ids count only real tokens, so every row
sees exactly the positions and keys it would see alone. Right-padded rows (`hidden`, for
scoring) hold the same property, which is what makes "generate log-probs == score log-probs"
hold to float tolerance.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from orsd_gym.policies.batching import longest_first
from orsd_gym.policies.kvcache import (
    KVSession,
    batch_cache,
    common_prefix,
    shared_prefix_groups,
    store_sessions,
    write_suffixes,
)
from orsd_gym.profiling import count

#: How far a prefill group's padded positions may exceed its tokens (0.25: by a quarter).
PREFILL_PADDING = 0.25


class CachedForward:
    """The decoder and LM head of ``model`` (a transformers causal LM, LoRA-wrapped or not).

    ``share_prefixes``: encode once a prefix that several rows of one call share (same tokens).
    """

    def __init__(self, model: Any, pad_token_id: int, *, share_prefixes: bool = True) -> None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.config = base.config
        self.decoder = base.get_decoder()
        self.lm_head = base.get_output_embeddings()
        self.pad = int(pad_token_id)
        self.share_prefixes = share_prefixes
        #: Prefill rows in groups of similar length (`prefill_groups`; False: one batch padded
        #: to its longest row, the former path, kept for side-by-side runs).
        self.group_prefill = True
        self.device = next(model.parameters()).device
        forward = inspect.signature(self.decoder.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward else "past_key_values"
        self.num_layers = int(self.config.num_hidden_layers)
        self.max_positions = int(getattr(self.config, "max_position_embeddings", 1 << 30))
        # Sliding-window caches drop old keys, so a stored prefix cannot be spliced back in.
        self.supports_prefix_cache = not getattr(self.config, "use_sliding_window", False) and not any(
            kind != "full_attention" for kind in (getattr(self.config, "layer_types", None) or [])
        )

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.weight.shape[0])

    def prefill(
        self, contexts: list[list[int]], sessions: Sequence[KVSession] | None, room: int
    ) -> tuple[torch.Tensor, list[int], set[int], Any, torch.Tensor]:
        """Encode each context after the prefix it finds cached (`prefix_sources`), rows of
        similar length together (`prefill_groups`), into one left-padded batch cache:
        ``(next-token logits, tokens reused per row, rows on a shared prefix, the cache with
        ``room`` more positions per row, the attention mask)``."""
        reuse, shared, sources = self.prefix_sources(contexts, sessions)
        cached = max(reuse)
        suffixes = [ctx[r:] for ctx, r in zip(contexts, reuse, strict=True)]
        width = max(len(s) for s in suffixes)
        input_ids, mask = self._left_padded(suffixes, reuse, cached)
        cache = batch_cache(sources, reuse, cached, self.num_layers, width + room)
        count("prefill_tokens", sum(len(suffix) for suffix in suffixes))
        groups = self.prefill_groups([len(s) for s in suffixes]) if self.group_prefill else [list(range(len(suffixes)))]
        if len(groups) == 1:
            count("prefill_positions", len(contexts) * width)  # pads included: the batch's padding waste
            return self.step(input_ids, mask, cache, cached), reuse, shared, cache, mask
        logits: list[torch.Tensor | None] = [None] * len(contexts)
        for rows in groups:
            part_reuse = [reuse[i] for i in rows]
            part_cached = max(part_reuse)
            part_ids, part_mask = self._left_padded([suffixes[i] for i in rows], part_reuse, part_cached)
            part = batch_cache([sources[i] for i in rows], part_reuse, part_cached, self.num_layers, part_ids.shape[1])
            count("prefill_positions", part_ids.numel())
            for i, row_logits in zip(rows, self.step(part_ids, part_mask, part, part_cached), strict=True):
                logits[i] = row_logits
            write_suffixes(cache, len(contexts), rows, part, [len(suffixes[i]) for i in rows], cached + width)
        return torch.stack([row for row in logits if row is not None]), reuse, shared, cache, mask

    def prefill_groups(self, lengths: list[int]) -> list[list[int]]:
        """Rows prefilled together: longest first, a group closing before its padded positions
        would exceed its tokens by more than `PREFILL_PADDING`, so pages of very different
        lengths do not pad to the longest."""

        def fits(rows: int, longest: int, members: list[int]) -> bool:
            return rows * longest <= (1 + PREFILL_PADDING) * sum(lengths[i] for i in members)

        groups: list[list[int]] = []
        for index in longest_first(lengths):
            if groups and fits(len(groups[-1]) + 1, lengths[groups[-1][0]], [*groups[-1], index]):
                groups[-1].append(index)
            else:
                groups.append([index])
        return groups

    def _left_padded(
        self, suffixes: list[list[int]], reuse: list[int], cached: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input ids, attention mask)`` of rows whose ``reuse[i]`` cached tokens end at
        ``cached`` and whose ``suffixes[i]`` follow, left-padded to the longest."""
        width = max(len(s) for s in suffixes)
        mask = torch.zeros(len(suffixes), cached + width, dtype=torch.long, device=self.device)
        input_ids = torch.full((len(suffixes), width), self.pad, dtype=torch.long, device=self.device)
        for i, (r, suffix) in enumerate(zip(reuse, suffixes, strict=True)):
            mask[i, cached - r : cached] = 1
            mask[i, cached + width - len(suffix) :] = 1
            input_ids[i, width - len(suffix) :] = torch.tensor(suffix, device=self.device)
        return input_ids, mask

    def prefix_sources(
        self, contexts: list[list[int]], sessions: Sequence[KVSession] | None
    ) -> tuple[list[int], set[int], list[KVSession | None]]:
        """Where each row's cached prefix comes from: ``(tokens reused, rows on a shared
        prefix, the session holding them)``.

        A row reuses its own session's longest common prefix with its context; rows that have
        none but share a prefix with other rows of the call (a GRPO group's first turn, ORSD's
        K proposals) start from one encoding of that prefix (`shared_prefix_groups`).
        """
        batch = len(contexts)
        reuse = [0] * batch
        sources: list[KVSession | None] = [None] * batch
        if not self.supports_prefix_cache:
            return reuse, set(), sources
        if sessions is not None:
            for i, (ctx, session) in enumerate(zip(contexts, sessions, strict=True)):
                if session.layers is not None:
                    # At least one new token must be fed to get next-token logits.
                    reuse[i] = min(common_prefix(session.token_ids, ctx), len(ctx) - 1)
                    sources[i] = session if reuse[i] > 0 else None
        shared: set[int] = set()
        if self.share_prefixes:
            groups = shared_prefix_groups(contexts, [i for i in range(batch) if reuse[i] == 0])
            for (rows, _), session in zip(groups, self._encode_prefixes(contexts, groups), strict=True):
                for i in rows:
                    reuse[i], sources[i] = len(session.token_ids), session
                shared.update(rows)
        return reuse, shared, sources

    def _encode_prefixes(self, contexts: list[list[int]], groups: list[tuple[list[int], int]]) -> list[KVSession]:
        """One session per group holding the keys/values of the group's common prefix (one
        left-padded forward pass for all groups)."""
        if not groups:
            return []
        prefixes = [contexts[rows[0]][:length] for rows, length in groups]
        width = max(len(p) for p in prefixes)
        ids = torch.full((len(prefixes), width), self.pad, dtype=torch.long)
        mask = torch.zeros(len(prefixes), width, dtype=torch.long)
        for j, prefix in enumerate(prefixes):
            ids[j, width - len(prefix) :] = torch.tensor(prefix)
            mask[j, width - len(prefix) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        cache = batch_cache([None] * len(prefixes), [0] * len(prefixes), 0, self.num_layers, width)
        self.step(ids, mask, cache, 0)
        count("prefill_tokens", sum(len(p) for p in prefixes))
        count("prefill_positions", len(prefixes) * width)
        sessions = [KVSession() for _ in prefixes]
        store_sessions(sessions, cache, mask, prefixes)
        return sessions

    def step(self, input_ids: torch.Tensor, mask: torch.Tensor, cache: Any, offset: int) -> torch.Tensor:
        """Feed ``input_ids`` after ``offset`` cached positions; the next-token logits (float32)."""
        # Positions count real tokens only, so pads anywhere in the row change nothing.
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)[:, offset:]
        hidden = self.decoder(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_kwarg: cache},
        ).last_hidden_state
        # The LM head on a contiguous [rows, hidden] matrix: given the [rows, 1, hidden] slice a
        # causal LM's own head sees, CPU bfloat16 matmul copies the head's weight once per row
        # (benchmarks/README.md).
        return self.lm_head(hidden[:, -1].contiguous()).float()

    def hidden(self, rows: list[list[int]]) -> torch.Tensor:
        """Final hidden states of right-padded ``rows``: ``[len(rows), max_len, hidden]``."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long, device=self.device)
        mask = torch.zeros_like(ids)
        for j, row in enumerate(rows):
            ids[j, : len(row)] = torch.tensor(row, device=self.device)
            mask[j, : len(row)] = 1
        return self.decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state


def checked_token_ids(sequences: Sequence[Sequence[int]], vocab_size: int, what: str) -> list[list[int]]:
    """``sequences`` as lists of ints, each non-empty and within the vocabulary."""
    checked = []
    for i, seq in enumerate(sequences):
        seq = [int(t) for t in seq]
        if not seq:
            raise ValueError(f"{what}[{i}] is empty; every sequence needs at least one token")
        if min(seq) < 0 or max(seq) >= vocab_size:
            raise ValueError(f"{what}[{i}] has token ids outside [0, {vocab_size})")
        checked.append(seq)
    return checked
