"""`HFPolicy`: the `Policy` protocol on a transformers causal LM (CPU or CUDA, optional LoRA).

Generation is a hand-written sampling loop rather than ``model.generate`` because the toolkit
needs three things ``generate`` does not give directly: the log-prob of every sampled token
under the exact distribution it was drawn from (temperature + top-p), a sampling Generator
the caller controls, and a *prefix cache* (`KVSession`) so that a multi-turn rollout encodes
only the tokens added since the episode's previous turn.

Batched layout. Each row of a batch is ``[left pad | cached prefix | pad | new suffix]`` in one
2-D attention mask; pads are masked out and position ids count only real tokens, so every row
sees exactly the positions and keys it would see alone. The same holds for `score`, which is
what makes "generate log-probs == score log-probs" hold to float tolerance.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch.utils.checkpoint import checkpoint

from orsd_gym.errors import ContextTooLongError
from orsd_gym.policies.base import Completion, FinishReason, SamplingParams
from orsd_gym.policies.chat import ChatRenderer
from orsd_gym.policies.kvcache import KVSession, batch_cache, common_prefix, shared_prefix_groups, store_sessions
from orsd_gym.profiling import count, phase


@dataclass(frozen=True)
class LoRASettings:
    """peft LoRA adapters on the attention projections (what `load_policy(lora=...)` takes)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


def resolve_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in table:
        raise ValueError(f"dtype={dtype!r}; choose 'auto' or one of {sorted(table)}")
    return table[dtype]


def load_pretrained(source: str, *, device: str, dtype: str | torch.dtype, attn_implementation: str | None):
    """``(model, tokenizer)`` from a ``from_pretrained`` directory or hub id, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # The per-tensor "Loading weights" bar would interleave with our own progress views.
    hf_logging.disable_progress_bar()
    torch_dtype = resolve_dtype(dtype, device)
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs).to(device)
    tokenizer = AutoTokenizer.from_pretrained(source)
    model.eval()
    return model, tokenizer


class HFPolicy:
    """A transformers causal LM behind the `Policy` protocol.

    ``token_budget`` caps ``rows * padded_length`` of one `score` / `next_token_logprobs`
    micro-batch; ``logits_chunk`` is how many positions go through the LM head at once (the
    ``[positions, vocab]`` logits are the memory peak of scoring: 256 positions of a 49k vocabulary
    take 50 MB per float32 copy, and a chunk's softmax and gradient hold a few; under
    ``with_grad`` each chunk is recomputed on backward instead of stored).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        lora: LoRASettings | dict[str, Any] | None = None,
        seed: int = 0,
        chat_template_kwargs: dict[str, Any] | None = None,
        name: str = "",
        token_budget: int = 16_384,
        logits_chunk: int = 256,
        gradient_checkpointing: bool = False,
        share_prefixes: bool = True,
        inference_dtype: str | torch.dtype | None = None,
        update_dtype: str | torch.dtype | None = None,
    ) -> None:
        if token_budget < 1 or logits_chunk < 1:
            raise ValueError("token_budget and logits_chunk must be >= 1")
        if gradient_checkpointing:
            # Updates keep only each decoder layer's input and recompute the layer on backward:
            # activations of a long micro-batch otherwise take ~1.5 MB per token in fp32 for a
            # 135M model. Only active in train mode, so sampling and scoring are unaffected.
            no_reentrant = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=no_reentrant)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=no_reentrant)
        self.gradient_checkpointing = gradient_checkpointing
        if lora is not None:
            model = _wrap_lora(model, lora)
        self.model = model
        self._tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.name = name
        self.seed = seed
        self._chat = ChatRenderer(tokenizer, chat_template_kwargs)
        self.token_budget = token_budget
        self.logits_chunk = logits_chunk
        #: Encode a prefix that several rows of one `generate` call share once (same tokens).
        self.share_prefixes = share_prefixes
        self.device = next(model.parameters()).device
        weights_dtype = next(model.parameters()).dtype
        #: The dtype sampling and scoring without gradients compute in: the weights' own, or a
        #: lower precision through autocast.
        self.inference_dtype = _compute_dtype(inference_dtype, weights_dtype, self.device.type, "inference_dtype")
        #: The dtype updates compute in (the weights' own, or bf16/fp16 compute over float32
        #: master weights through autocast), and with it everything that enters a loss without
        #: gradients: `score(..., in_update_dtype=True)`.
        self.update_dtype = _compute_dtype(update_dtype, weights_dtype, self.device.type, "update_dtype")
        self._generator = torch.Generator(device=self.device).manual_seed(seed)
        self.stop_token_ids = self._find_stop_token_ids()
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._decoder = base.get_decoder()
        self._lm_head = base.get_output_embeddings()
        forward = inspect.signature(self._decoder.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward else "past_key_values"
        config = base.config
        self._num_layers = int(config.num_hidden_layers)
        self._max_positions = int(getattr(config, "max_position_embeddings", 1 << 30))
        # Sliding-window caches drop old keys, so a stored prefix cannot be spliced back in.
        self.supports_prefix_cache = not getattr(config, "use_sliding_window", False) and not any(
            kind != "full_attention" for kind in (getattr(config, "layer_types", None) or [])
        )

    # ------------------------------------------------------------------ protocol: tokens
    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_positions(self) -> int:
        return self._max_positions

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of sampling and of scoring without gradients (`inference_dtype`)."""
        return self.inference_dtype

    @property
    def weights_dtype(self) -> torch.dtype:
        return self._lm_head.weight.dtype

    def _inference(self) -> Any:
        """No gradients, computing in `inference_dtype`."""
        return _computing_in(self.device.type, self.inference_dtype, self.weights_dtype, grad=False)

    def _scoring(self, *, with_grad: bool, in_update_dtype: bool) -> Any:
        """What a `score` call computes in: `update_dtype` with gradients or when asked for
        (a loss's inputs), `inference_dtype` otherwise."""
        if with_grad or in_update_dtype:
            return _computing_in(self.device.type, self.update_dtype, self.weights_dtype, grad=with_grad)
        return self._inference()

    @property
    def vocab_size(self) -> int:
        return int(self._lm_head.weight.shape[0])

    def _find_stop_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        if self._tokenizer.eos_token_id is not None:
            ids.add(int(self._tokenizer.eos_token_id))
        generation_config = getattr(self.model, "generation_config", None)
        configured = getattr(generation_config, "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif configured:
            ids.update(int(i) for i in configured)
        return frozenset(ids)

    @property
    def chat(self) -> ChatRenderer:
        return self._chat

    def new_session(self) -> KVSession:
        return KVSession()

    def _check_tokens(self, sequences: Sequence[Sequence[int]], what: str) -> list[list[int]]:
        checked = []
        vocab = self.vocab_size
        for i, seq in enumerate(sequences):
            seq = [int(t) for t in seq]
            if not seq:
                raise ValueError(f"{what}[{i}] is empty; every sequence needs at least one token")
            if min(seq) < 0 or max(seq) >= vocab:
                raise ValueError(f"{what}[{i}] has token ids outside [0, {vocab})")
            checked.append(seq)
        return checked

    # ------------------------------------------------------------------ protocol: sampling
    def generate(
        self,
        contexts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        sessions: Sequence[KVSession] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Sample one completion per context, batched (left-padded).

        ``sessions`` (one per context, optional) is the prefix cache: keys/values of a previous
        call's context + completion are reused for the longest common prefix, and each session
        is updated to cover this call's context + completion. Completions keep the stop token /
        stop string tokens they ended with (they are what the model sampled); ``text`` is the
        decoded completion without a final EOS token. With ``temperature == 0`` (greedy) the
        log-probs are those of the untempered model. ``seeds`` (one per context) gives each row
        its own generator, so a row samples the same tokens whatever else is in the batch.
        """
        contexts = self._check_tokens(contexts, "contexts")
        if sessions is not None and len(sessions) != len(contexts):
            raise ValueError(f"got {len(sessions)} sessions for {len(contexts)} contexts")
        for i, ctx in enumerate(contexts):
            if len(ctx) + params.max_new_tokens > self.max_positions:
                raise ContextTooLongError(
                    f"contexts[{i}] has {len(ctx)} tokens + max_new_tokens={params.max_new_tokens} > the model's "
                    f"{self.max_positions} positions; shorten the episode budget"
                )
        if seeds is not None:
            if len(seeds) != len(contexts):
                raise ValueError(f"got {len(seeds)} seeds for {len(contexts)} contexts")
            generator: torch.Generator | list[torch.Generator] = [
                torch.Generator(device=self.device).manual_seed(int(s)) for s in seeds
            ]
        elif params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed)
        else:
            generator = self._generator
        with self._inference():
            return self._generate(contexts, params, sessions, generator)

    def _generate(
        self,
        contexts: list[list[int]],
        params: SamplingParams,
        sessions: Sequence[KVSession] | None,
        generator: torch.Generator | list[torch.Generator],
    ) -> list[Completion]:
        batch = len(contexts)
        pad = int(self._tokenizer.pad_token_id)
        with phase("prefill"):
            logits, reuse, shared, cache, mask = self._prefill(contexts, sessions, params.max_new_tokens)
        in_cache = [list(ctx) for ctx in contexts]

        tokens: list[list[int]] = [[] for _ in range(batch)]
        logprobs: list[list[float]] = [[] for _ in range(batch)]
        finish: list[FinishReason | None] = [None] * batch
        with phase("decode"):
            for _ in range(params.max_new_tokens):
                sampled, sampled_logprobs = _sample(logits, params, generator)
                # One transfer per step (not one per row): on a GPU each element read is a sync.
                sampled_ids, sampled_lps = sampled.tolist(), sampled_logprobs.tolist()
                fed, next_ids = [0] * batch, [pad] * batch
                for i in range(batch):
                    if finish[i] is not None:
                        continue
                    tokens[i].append(sampled_ids[i])
                    logprobs[i].append(sampled_lps[i])
                    fed[i], next_ids[i] = 1, sampled_ids[i]
                    finish[i] = self._finish_reason(tokens[i], params)
                if all(f is not None for f in finish):
                    break
                # Feed each row's newest token (cached for the next turn even if the row just
                # finished); rows finished earlier get a masked pad.
                for i in range(batch):
                    if fed[i]:
                        in_cache[i].append(next_ids[i])
                mask = torch.cat([mask, torch.tensor(fed, device=self.device)[:, None]], dim=1)
                logits = self._step(torch.tensor(next_ids, device=self.device)[:, None], mask, cache, mask.shape[1] - 1)
                count("decode_steps")
                count("decode_row_steps", batch)
                count("decode_attended_positions", batch * mask.shape[1])
            if sessions is not None and self.supports_prefix_cache:
                store_sessions(sessions, cache, mask, in_cache)
        count("sampled_tokens", sum(len(t) for t in tokens))
        completions = []
        for i in range(batch):
            reason = finish[i] or "length"
            body = tokens[i][:-1] if reason == "eos" else tokens[i]
            text = self._tokenizer.decode(body, skip_special_tokens=False)
            extra = {
                "reused_prefix_tokens": 0 if i in shared else reuse[i],
                "shared_prefix_tokens": reuse[i] if i in shared else 0,
            }
            completions.append(Completion(list(tokens[i]), logprobs[i], text, reason, extra=extra))
        return completions

    def _prefill(
        self, contexts: list[list[int]], sessions: Sequence[KVSession] | None, room: int
    ) -> tuple[torch.Tensor, list[int], set[int], Any, torch.Tensor]:
        """Encode each context after the prefix it finds cached (`_prefix_sources`), left-padded
        into one batch: ``(next-token logits, tokens reused per row, rows on a shared prefix,
        the cache with ``room`` more positions per row, the attention mask)``."""
        reuse, shared, sources = self._prefix_sources(contexts, sessions)
        cached = max(reuse)
        suffixes = [ctx[r:] for ctx, r in zip(contexts, reuse, strict=True)]
        width = max(len(s) for s in suffixes)
        mask = torch.zeros(len(contexts), cached + width, dtype=torch.long, device=self.device)
        input_ids = torch.full(
            (len(contexts), width), int(self._tokenizer.pad_token_id), dtype=torch.long, device=self.device
        )
        for i, (r, suffix) in enumerate(zip(reuse, suffixes, strict=True)):
            mask[i, cached - r : cached] = 1
            mask[i, cached + width - len(suffix) :] = 1
            input_ids[i, width - len(suffix) :] = torch.tensor(suffix, device=self.device)
        cache = batch_cache(sources, reuse, cached, self._num_layers, width + room)
        count("prefill_tokens", sum(len(suffix) for suffix in suffixes))
        return self._step(input_ids, mask, cache, cached), reuse, shared, cache, mask

    def _prefix_sources(
        self, contexts: list[list[int]], sessions: Sequence[KVSession] | None
    ) -> tuple[list[int], set[int], list[KVSession | None]]:
        """Where each row's cached prefix comes from: ``(tokens reused, rows on a shared
        prefix, the session holding them)``.

        A row reuses its own session's longest common prefix with its context; rows that have
        none but share a prefix with other rows of the call (a GRPO group's first turn, ORSD's
        K proposals) start from one encoding of that prefix (`_shared_prefix_groups`).
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
        ids = torch.full((len(prefixes), width), int(self._tokenizer.pad_token_id), dtype=torch.long)
        mask = torch.zeros(len(prefixes), width, dtype=torch.long)
        for j, prefix in enumerate(prefixes):
            ids[j, width - len(prefix) :] = torch.tensor(prefix)
            mask[j, width - len(prefix) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        cache = batch_cache([None] * len(prefixes), [0] * len(prefixes), 0, self._num_layers, width)
        self._step(ids, mask, cache, 0)
        count("prefill_tokens", sum(len(p) for p in prefixes))
        sessions = [KVSession() for _ in prefixes]
        store_sessions(sessions, cache, mask, prefixes)
        return sessions

    def _finish_reason(self, tokens: list[int], params: SamplingParams) -> FinishReason | None:
        if tokens[-1] in self.stop_token_ids:
            return "eos"
        if params.stop:
            # Only the tail can contain a stop string that was not there one token ago.
            longest = max(len(s) for s in params.stop)
            tail = self._tokenizer.decode(tokens[-(longest + 2) :], skip_special_tokens=False)
            if any(s in tail for s in params.stop):
                return "stop"
        if len(tokens) >= params.max_new_tokens:
            return "length"
        return None

    def _step(self, input_ids: torch.Tensor, mask: torch.Tensor, cache: Any, offset: int) -> torch.Tensor:
        # Positions count real tokens only, so pads anywhere in the row change nothing.
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)[:, offset:]
        hidden = self._decoder(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_kwarg: cache},
        ).last_hidden_state
        # The LM head on a contiguous [rows, hidden] matrix: given the [rows, 1, hidden] slice a
        # causal LM's own head sees, CPU bfloat16 matmul copies the head's weight once per row
        # ([rows, hidden, vocab]: 1.4 GB for 24 rows of SmolLM2; benchmarks/README.md).
        return self._lm_head(hidden[:, -1].contiguous()).float()

    # ------------------------------------------------------------------ protocol: scoring
    def _micro_batches(self, lengths: list[int]) -> list[list[int]]:
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        batches: list[list[int]] = []
        for i in order:
            if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= self.token_budget:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _prefix_micro_batches(self, contexts: list[list[int]]) -> list[list[int]]:
        """Micro-batches of ``rows * longest`` at most the token budget, over the contexts in
        sorted order, so that contexts with a common prefix land in the same one."""
        batches: list[list[int]] = []
        longest = 0
        for i in sorted(range(len(contexts)), key=lambda i: contexts[i]):
            wider = max(longest, len(contexts[i]))
            if batches and (len(batches[-1]) + 1) * wider <= self.token_budget:
                batches[-1].append(i)
                longest = wider
            else:
                batches.append([i])
                longest = len(contexts[i])
        return batches

    def _hidden(self, rows: list[list[int]]) -> torch.Tensor:
        """Final hidden states of right-padded ``rows``: ``[len(rows), max_len, hidden]``."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), int(self._tokenizer.pad_token_id), dtype=torch.long, device=self.device)
        mask = torch.zeros_like(ids)
        for j, row in enumerate(rows):
            ids[j, : len(row)] = torch.tensor(row, device=self.device)
            mask[j, : len(row)] = 1
        return self._decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state

    def score(
        self,
        sequences: Sequence[Sequence[int]],
        loss_masks: Sequence[Sequence[int]] | None = None,
        *,
        with_grad: bool = False,
        return_entropy: bool = False,
        temperature: float = 1.0,
        in_update_dtype: bool = False,
    ) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
        """See `Policy.score`. With ``loss_masks`` only mask-1 positions are computed (others 0).

        Tensors are float32 on the policy's device.
        """
        sequences = self._check_tokens(sequences, "sequences")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for scoring, got {temperature}")
        if loss_masks is not None:
            if len(loss_masks) != len(sequences):
                raise ValueError(f"got {len(loss_masks)} loss masks for {len(sequences)} sequences")
            for i, (seq, m) in enumerate(zip(sequences, loss_masks, strict=True)):
                if len(m) != len(seq):
                    raise ValueError(f"loss_masks[{i}] has length {len(m)}, sequence has {len(seq)}")
        logps: list[torch.Tensor | None] = [None] * len(sequences)
        entropies: list[torch.Tensor | None] = [None] * len(sequences)
        computing = self._scoring(with_grad=with_grad, in_update_dtype=in_update_dtype)
        with computing, phase("forward" if with_grad else "score"):
            for batch in self._micro_batches([len(s) for s in sequences]):
                rows = [sequences[i] for i in batch]
                hidden = self._hidden(rows)
                where_row, where_pos, targets, counts = [], [], [], []
                for j, i in enumerate(batch):
                    seq = sequences[i]
                    wanted = [t for t in range(1, len(seq)) if loss_masks is None or loss_masks[i][t]]
                    counts.append(len(wanted))
                    where_row.extend([j] * len(wanted))
                    where_pos.extend(wanted)
                    targets.extend(seq[t] for t in wanted)
                n_sel = len(targets)
                sel_logp = hidden.new_zeros(0, dtype=torch.float32)
                sel_ent = hidden.new_zeros(0, dtype=torch.float32)
                if n_sel:
                    rows_t = torch.tensor(where_row, device=self.device)
                    pos_t = torch.tensor(where_pos, device=self.device)
                    selected = hidden[rows_t, pos_t - 1]
                    target_t = torch.tensor(targets, device=self.device)
                    parts = [
                        self._head_logprobs(
                            selected[s : s + self.logits_chunk],
                            target_t[s : s + self.logits_chunk],
                            temperature,
                            with_grad=with_grad,
                            entropy=return_entropy,
                        )
                        for s in range(0, n_sel, self.logits_chunk)
                    ]
                    sel_logp = torch.cat([p[0] for p in parts])
                    if return_entropy:
                        sel_ent = torch.cat([p[1] for p in parts])
                start = 0
                for j, i in enumerate(batch):
                    n = counts[j]
                    positions = torch.tensor(where_pos[start : start + n], device=self.device, dtype=torch.long)
                    zeros = torch.zeros(len(sequences[i]), dtype=torch.float32, device=self.device)
                    logps[i] = zeros.index_put((positions,), sel_logp[start : start + n])
                    if return_entropy:
                        entropies[i] = zeros.index_put((positions,), sel_ent[start : start + n])
                    start += n
        if return_entropy:
            return list(logps), list(entropies)  # type: ignore[arg-type]
        return list(logps)  # type: ignore[arg-type]

    def _head_logprobs(
        self, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, *, with_grad: bool, entropy: bool
    ) -> tuple[torch.Tensor, ...]:
        """``(log-probs,)`` of ``targets`` after ``hidden``, plus the entropies when ``entropy``."""

        def head(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            logits = self._lm_head(h).float()
            if temperature != 1.0:
                logits = logits / temperature
            lse = torch.logsumexp(logits, dim=-1)
            logp = logits.gather(-1, y[:, None]).squeeze(-1) - lse
            if not entropy:
                return (logp,)
            return logp, lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)

        if with_grad and torch.is_grad_enabled():
            # Recompute the [chunk, vocab] logits on backward rather than keeping them alive.
            return checkpoint(head, hidden, targets, use_reentrant=False)
        return head(hidden, targets)

    def next_token_logprobs(self, contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        """See `Policy.next_token_logprobs`; a float32 CPU tensor ``[len(contexts), vocab]``."""
        contexts = self._check_tokens(contexts, "contexts")
        out = torch.empty(len(contexts), self.vocab_size, dtype=torch.float32)
        with self._inference(), phase("score"):
            if self.share_prefixes and self.supports_prefix_cache:
                # A verifier asks several questions about one attempt: the contexts share all but
                # their last lines, and each shared prefix is encoded once per micro-batch.
                for batch in self._prefix_micro_batches(contexts):
                    logits = self._prefill([contexts[i] for i in batch], None, 0)[0]
                    out[batch] = torch.log_softmax(logits, dim=-1).cpu()
                return out
            for batch in self._micro_batches([len(c) for c in contexts]):
                rows = [contexts[i] for i in batch]
                hidden = self._hidden(rows)
                last = hidden[
                    torch.arange(len(rows), device=self.device),
                    torch.tensor([len(r) - 1 for r in rows], device=self.device),
                ]
                out[batch] = torch.log_softmax(self._lm_head(last).float(), dim=-1).cpu()
        return out

    # ------------------------------------------------------------------ protocol: memory
    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def update_activation_bytes(self, rows: int, length: int) -> int:
        """See `Policy.update_activation_bytes`. Per token: each layer's input (with gradient
        checkpointing) or all of a layer's saved activations (without), plus one layer's
        activations and their gradients while it is recomputed, and the final hidden states;
        per micro-batch: the padding mask's ``[rows, length, length]`` booleans and one LM-head
        chunk (its logits, their exponentials and gradient, in float32). Calibrated against
        measured peaks in benchmarks/iteration_profile.py."""
        config = (self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model).config
        width = self.update_dtype.itemsize
        hidden, inner = int(config.hidden_size), int(config.intermediate_size)
        # A Llama-style layer keeps about 12 hidden-wide and 5 MLP-wide tensors per token.
        layer = (12 * hidden + 5 * inner) * width
        kept = self._num_layers * (hidden * width if self.gradient_checkpointing else layer)
        tokens = rows * length
        head = min(self.logits_chunk, tokens) * self.vocab_size * 4 * 4
        return tokens * (kept + 2 * layer + 3 * hidden * width) + rows * length * length + head

    # ------------------------------------------------------------------ protocol: weights
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().clone() for name, p in self.model.named_parameters() if p.requires_grad}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        params = dict(self.model.named_parameters())
        expected = {name for name, p in params.items() if p.requires_grad} or set(params)
        missing, unexpected = expected - set(state), set(state) - set(params)
        if missing or unexpected:
            raise KeyError(
                f"state dict does not match this policy: missing {sorted(missing)[:5]}, unexpected "
                f"{sorted(unexpected)[:5]} (was it saved from a policy with the same model and LoRA setting?)"
            )
        with torch.no_grad():
            for name, tensor in state.items():
                if params[name].shape != tensor.shape:
                    raise ValueError(f"{name}: shape {tuple(tensor.shape)} != expected {tuple(params[name].shape)}")
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))

    def save(self, path: str | Path) -> None:
        """Write `state_dict` to a safetensors file."""
        save_file(
            {k: v.contiguous().cpu() for k, v in self.state_dict().items()}, str(path), metadata={"model": self.name}
        )

    def load(self, path: str | Path) -> None:
        """Restore weights written by `save`."""
        if not Path(path).is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        self.load_state_dict(load_file(str(path)))

    def set_training(self, mode: bool) -> None:
        self.model.train(mode)

    def freeze(self) -> HFPolicy:
        """Turn off gradients for every parameter and switch to eval mode (in place)."""
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        self.model.eval()
        return self

    def copy_frozen(self, dtype: str | torch.dtype | None = None) -> HFPolicy:
        # A frozen copy holds its weights in the dtype it computes in. One in the policy's own
        # weights dtype (a KL reference) also computes a loss's inputs exactly as the policy does.
        inference_dtype = self.inference_dtype if dtype is None else resolve_dtype(dtype, self.device.type)
        update_dtype = self.update_dtype if inference_dtype == self.weights_dtype else inference_dtype
        model = _copy_in_dtype(self.model, inference_dtype)
        frozen = HFPolicy(
            model,
            self._tokenizer,
            seed=self.seed,
            chat_template_kwargs=self._chat.template_kwargs,
            name=self.name,
            token_budget=self.token_budget,
            logits_chunk=self.logits_chunk,
            share_prefixes=self.share_prefixes,
            inference_dtype=inference_dtype,
            update_dtype=update_dtype,
        )
        return frozen.freeze()


def _copy_in_dtype(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A deep copy of ``model`` whose parameters are made in ``dtype`` (tied ones stay tied;
    buffers keep theirs). Copying first and converting after would hold a second full-precision
    copy for a moment, whose freed pages the C allocator mostly keeps resident: +0.2 GB of peak
    and of resident memory for a bfloat16 copy of SmolLM2-135M."""
    memo: dict[int, Any] = {}
    for parameter in model.parameters():
        memo[id(parameter)] = torch.nn.Parameter(parameter.detach().to(dtype, copy=True), requires_grad=False)
    return copy.deepcopy(model, memo)


def _compute_dtype(dtype: str | torch.dtype | None, weights: torch.dtype, device_type: str, name: str) -> torch.dtype:
    """A compute dtype for weights held in ``weights`` (None: theirs); autocast can only narrow."""
    if dtype is None:
        return weights
    resolved = resolve_dtype(dtype, device_type)
    if resolved != weights and resolved.itemsize >= weights.itemsize:
        raise ValueError(
            f"{name}={resolved} cannot compute over weights held in {weights}: autocast only computes in a "
            "narrower dtype (hold the weights in float32 to compute in bfloat16 or float16)"
        )
    return resolved


@contextmanager
def _computing_in(device_type: str, dtype: torch.dtype, weights: torch.dtype, *, grad: bool) -> Iterator[None]:
    """Gradients on or off, and autocast to ``dtype`` where it differs from the weights'."""
    with torch.enable_grad() if grad else torch.no_grad():
        if dtype == weights:
            yield
        else:
            with torch.autocast(device_type, dtype=dtype):
                yield


def _sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | list[torch.Generator]):
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


def _wrap_lora(model: Any, lora: LoRASettings | dict[str, Any]) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as error:  # pragma: no cover - peft is in the models extra
        raise ImportError("LoRA needs peft: pip install 'orsd-gym[models]'") from error
    settings = lora if isinstance(lora, LoRASettings) else LoRASettings(**lora)
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft reads transformers' deprecated `is_gradient_checkpointing` alias: not the user's to fix.
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(model, config)
