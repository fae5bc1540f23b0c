"""`Sampler`: the decode loop of the transformers backend.

A hand-written loop rather than ``model.generate`` because the toolkit needs three things
``generate`` does not give directly: the log-prob of every sampled token under the exact
distribution it was drawn from (temperature + top-p), a sampling Generator the caller controls,
and a *prefix cache* (`KVSession`) so that a multi-turn rollout encodes only the tokens added
since the episode's previous turn.

Under a memory budget (``memory_budget``, bytes a call may add) a call's rows are generated in
chunks whose estimated footprint fits it, longest rows first so a chunk pads little. Each row
draws from its own generator when the caller gives per-row ``seeds`` (every caller in the
toolkit does), so a row samples the same tokens in a chunk as in one batch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from orsd_gym.errors import ContextTooLongError
from orsd_gym.policies.base import Completion, FinishReason, SamplingParams
from orsd_gym.policies.batching import longest_first, micro_batches
from orsd_gym.policies.forward import CachedForward
from orsd_gym.policies.kvcache import KVSession, keep_rows, store_sessions
from orsd_gym.profiling import count, phase

Generators = torch.Generator | list[torch.Generator]

#: The share of a batch's rows that must have finished their turn before they leave it.
DROP_FINISHED_SHARE = 0.25


class Sampler:
    """Samples completions from ``forward``'s model; ``seed`` seeds its default generator.

    ``footprint(rows, length)``: the bytes generating ``rows`` rows of at most ``length``
    positions adds; ``memory_budget`` (bytes, None: one batch) is what a call may add on top of
    the sessions it is given."""

    def __init__(
        self,
        forward: CachedForward,
        tokenizer: Any,
        stop_token_ids: frozenset[int],
        seed: int,
        footprint: Callable[[int, int], int],
    ) -> None:
        self.forward = forward
        self.tokenizer = tokenizer
        self.stop_token_ids = stop_token_ids
        self.device = forward.device
        self.footprint = footprint
        self.memory_budget: int | None = None
        #: Rows that finished their turn leave the decode batch (False: they ride along masked
        #: until the batch's longest turn ends, the former path, kept for side-by-side runs).
        self.drop_finished_rows = True
        self._generator = torch.Generator(device=self.device).manual_seed(seed)

    def generate(
        self,
        contexts: list[list[int]],
        params: SamplingParams,
        sessions: Sequence[KVSession] | None,
        seeds: Sequence[int] | None,
    ) -> list[Completion]:
        """See `HFPolicy.generate` (``contexts`` already checked to be token ids)."""
        if sessions is not None and len(sessions) != len(contexts):
            raise ValueError(f"got {len(sessions)} sessions for {len(contexts)} contexts")
        for i, ctx in enumerate(contexts):
            if len(ctx) + params.max_new_tokens > self.forward.max_positions:
                raise ContextTooLongError(
                    f"contexts[{i}] has {len(ctx)} tokens + max_new_tokens={params.max_new_tokens} > the model's "
                    f"{self.forward.max_positions} positions; shorten the episode budget"
                )
        generators = self._generators(len(contexts), params, seeds)
        chunks = self.chunks(contexts, params, sessions)
        if len(chunks) == 1:
            return self._decode(contexts, params, sessions, generators)
        completions: list[Completion | None] = [None] * len(contexts)
        for chunk in chunks:
            done = self._decode(
                [contexts[i] for i in chunk],
                params,
                None if sessions is None else [sessions[i] for i in chunk],
                [generators[i] for i in chunk] if isinstance(generators, list) else generators,
            )
            for i, completion in zip(chunk, done, strict=True):
                completions[i] = completion
        count("generate_chunks", len(chunks))
        return [c for c in completions if c is not None]

    def chunks(
        self, contexts: list[list[int]], params: SamplingParams, sessions: Sequence[KVSession] | None
    ) -> list[list[int]]:
        """The row chunks a call generates in: one batch without a memory budget, else chunks,
        longest rows first, whose `footprint` fits the budget less the sessions' bytes (which
        stay held while the call runs). Sessions that leave no room for the longest row alone
        are dropped, largest first (a cache: the row then encodes its whole context); a row
        that fits nothing goes alone."""
        if self.memory_budget is None:
            return [list(range(len(contexts)))]
        lengths = [len(ctx) + params.max_new_tokens for ctx in contexts]
        room = self.memory_budget - sum(s.nbytes() for s in sessions or ())
        for session in sorted(sessions or (), key=lambda s: s.nbytes(), reverse=True):
            if room >= self.footprint(1, max(lengths)):
                break
            room += session.nbytes()
            session.clear()
        return micro_batches(
            longest_first(lengths), lengths, sys.maxsize, lambda rows, length: self.footprint(rows, length) <= room
        )

    def _generators(self, rows: int, params: SamplingParams, seeds: Sequence[int] | None) -> Generators:
        """One generator per row (``seeds``), one for the call (``params.seed``), or the sampler's."""
        if seeds is not None:
            if len(seeds) != rows:
                raise ValueError(f"got {len(seeds)} seeds for {rows} contexts")
            return [torch.Generator(device=self.device).manual_seed(int(s)) for s in seeds]
        if params.seed is not None:
            return torch.Generator(device=self.device).manual_seed(params.seed)
        return self._generator

    def _decode(
        self,
        contexts: list[list[int]],
        params: SamplingParams,
        sessions: Sequence[KVSession] | None,
        generator: Generators,
    ) -> list[Completion]:
        batch = len(contexts)
        pad = self.forward.pad
        with phase("prefill"):
            logits, reuse, shared, cache, mask = self.forward.prefill(contexts, sessions, params.max_new_tokens)
        in_cache = [list(ctx) for ctx in contexts]

        tokens: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        finish: list[FinishReason | None] = [None] * batch
        keep_sessions = sessions is not None and self.forward.supports_prefix_cache
        # Batch row j is context live[j]: rows that finished leave the batch (`_drop_finished`).
        live = list(range(batch))
        with phase("decode"):
            for _ in range(params.max_new_tokens):
                row_generators = [generator[i] for i in live] if isinstance(generator, list) else generator
                sampled, sampled_logprobs = sample_tokens(logits, params, row_generators)
                # One transfer per step (not one per row): on a GPU each element read is a sync.
                sampled_ids, sampled_lps = sampled.tolist(), sampled_logprobs.tolist()
                fed, next_ids = [0] * len(live), [pad] * len(live)
                for j, i in enumerate(live):
                    if finish[i] is not None:
                        continue
                    tokens[i].append(sampled_ids[j])
                    logprobs[i].append(sampled_lps[j])
                    fed[j], next_ids[j] = 1, sampled_ids[j]
                    finish[i] = self._finish_reason(tokens[i], params)
                if all(f is not None for f in finish):
                    break
                # Feed each row's newest token (cached for the next turn even if the row just
                # finished); rows finished earlier get a masked pad.
                for j, i in enumerate(live):
                    if fed[j]:
                        in_cache[i].append(next_ids[j])
                mask = torch.cat([mask, torch.tensor(fed, device=self.device)[:, None]], dim=1)
                if self.drop_finished_rows and isinstance(generator, list):
                    kept = self._drop_finished(
                        live, fed, finish, cache, mask, sessions if keep_sessions else None, in_cache
                    )
                    if kept is not None:
                        mask, live, next_ids = mask[kept], [live[j] for j in kept], [next_ids[j] for j in kept]
                step_ids = torch.tensor(next_ids, device=self.device)[:, None]
                logits = self.forward.step(step_ids, mask, cache, mask.shape[1] - 1)
                count("decode_steps")
                count("decode_row_steps", len(live))
                count("decode_attended_positions", len(live) * mask.shape[1])
            if sessions is not None and keep_sessions:
                store_sessions([sessions[i] for i in live], cache, mask, [in_cache[i] for i in live])
        count("sampled_tokens", sum(len(t) for t in tokens))
        completions = []
        for i in range(batch):
            reason = finish[i] or "length"
            body = tokens[i][:-1] if reason == "eos" else tokens[i]
            text = self.tokenizer.decode(body, skip_special_tokens=False)
            extra = {
                "reused_prefix_tokens": 0 if i in shared else reuse[i],
                "shared_prefix_tokens": reuse[i] if i in shared else 0,
            }
            completions.append(Completion(list(tokens[i]), logprobs[i], text, reason, extra=extra))
        return completions

    def _drop_finished(
        self,
        live: list[int],
        fed: list[int],
        finish: list[FinishReason | None],
        cache: Any,
        mask: torch.Tensor,
        sessions: Sequence[KVSession] | None,
        in_cache: list[list[int]],
    ) -> list[int] | None:
        """When at least `DROP_FINISHED_SHARE` of the batch's rows finished before this step
        (their last token is cached), write their sessions and drop them from ``cache``; returns
        the batch rows kept (None: nothing dropped). Only with per-row generators: a shared one
        would draw differently for a smaller batch. Dropping in large steps bounds the copying
        (each drop copies the kept rows' keys and values) to a few times the cache."""
        done = [j for j, i in enumerate(live) if finish[i] is not None and not fed[j]]
        if not done or len(done) < DROP_FINISHED_SHARE * len(live):
            return None
        if sessions is not None:
            store_sessions([sessions[live[j]] for j in done], cache, mask, [in_cache[live[j]] for j in done], rows=done)
        kept = [j for j in range(len(live)) if fed[j] or finish[live[j]] is None]
        keep_rows(cache, torch.tensor(kept, device=self.device))
        return kept

    def _finish_reason(self, tokens: list[int], params: SamplingParams) -> FinishReason | None:
        if tokens[-1] in self.stop_token_ids:
            return "eos"
        if params.stop:
            # Only the tail can contain a stop string that was not there one token ago.
            longest = max(len(s) for s in params.stop)
            tail = self.tokenizer.decode(tokens[-(longest + 2) :], skip_special_tokens=False)
            if any(s in tail for s in params.stop):
                return "stop"
        if len(tokens) >= params.max_new_tokens:
            return "length"
        return None


def stop_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The tokenizer's EOS and every EOS the model's generation config names."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(i) for i in configured)
    return frozenset(ids)


def sample_tokens(logits: torch.Tensor, params: SamplingParams, generator: Generators):
    """Draw one token per row (from one generator, or each row from its own); return it and its
    log-prob under the (tempered, top-p) distribution."""
    if params.temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logp.argmax(dim=-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        cumulative = sorted_logp.exp().cumsum(dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (the first token always survives).
        drop_sorted = (cumulative - sorted_logp.exp()) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logp = torch.log_softmax(logp.masked_fill(drop, float("-inf")), dim=-1)
    probs = logp.exp()
    if isinstance(generator, list):
        rows = zip(probs, generator, strict=True)
        tokens = torch.cat([torch.multinomial(row, 1, generator=g) for row, g in rows])
    else:
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
