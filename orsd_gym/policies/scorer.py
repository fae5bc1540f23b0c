"""`Scorer`: log-probs (and entropies) of given tokens, in micro-batches, the LM head in chunks.

The ``[positions, vocab]`` logits are the memory peak of scoring: ``logits_chunk`` positions go
through the LM head at once, and under gradients each chunk is recomputed on backward instead
of stored (a chunk's softmax and gradient hold a few float32 copies of its logits).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.checkpoint import checkpoint

from orsd_gym.policies.batching import longest_first, micro_batches
from orsd_gym.policies.forward import CachedForward


class Scorer:
    """Scores sequences with ``forward``'s model; ``token_budget`` caps ``rows * padded length``
    of one micro-batch."""

    def __init__(self, forward: CachedForward, *, token_budget: int, logits_chunk: int) -> None:
        if token_budget < 1 or logits_chunk < 1:
            raise ValueError("token_budget and logits_chunk must be >= 1")
        self.forward = forward
        self.token_budget = token_budget
        self.logits_chunk = logits_chunk

    def score(
        self,
        sequences: list[list[int]],
        loss_masks: Sequence[Sequence[int]] | None,
        *,
        with_grad: bool,
        return_entropy: bool,
        temperature: float,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """Per-position log-probs of each sequence (and entropies when asked), float32 on the
        model's device; with ``loss_masks`` only mask-1 positions are computed (others 0)."""
        if loss_masks is not None:
            if len(loss_masks) != len(sequences):
                raise ValueError(f"got {len(loss_masks)} loss masks for {len(sequences)} sequences")
            for i, (seq, m) in enumerate(zip(sequences, loss_masks, strict=True)):
                if len(m) != len(seq):
                    raise ValueError(f"loss_masks[{i}] has length {len(m)}, sequence has {len(seq)}")
        device = self.forward.device
        logps: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        entropies: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        lengths = [len(s) for s in sequences]
        for batch in micro_batches(longest_first(lengths), lengths, self.token_budget):
            hidden = self.forward.hidden([sequences[i] for i in batch])
            where_row, where_pos, targets, counts = [], [], [], []
            for j, i in enumerate(batch):
                seq = sequences[i]
                wanted = [t for t in range(1, len(seq)) if loss_masks is None or loss_masks[i][t]]
                counts.append(len(wanted))
                where_row.extend([j] * len(wanted))
                where_pos.extend(wanted)
                targets.extend(seq[t] for t in wanted)
            sel_logp = hidden.new_zeros(0, dtype=torch.float32)
            sel_ent = hidden.new_zeros(0, dtype=torch.float32)
            if targets:
                selected = hidden[torch.tensor(where_row, device=device), torch.tensor(where_pos, device=device) - 1]
                target_t = torch.tensor(targets, device=device)
                parts = [
                    self._head_logprobs(
                        selected[s : s + self.logits_chunk],
                        target_t[s : s + self.logits_chunk],
                        temperature,
                        with_grad=with_grad,
                        entropy=return_entropy,
                    )
                    for s in range(0, len(targets), self.logits_chunk)
                ]
                sel_logp = torch.cat([p[0] for p in parts])
                if return_entropy:
                    sel_ent = torch.cat([p[1] for p in parts])
            start = 0
            for j, i in enumerate(batch):
                n = counts[j]
                positions = torch.tensor(where_pos[start : start + n], device=device, dtype=torch.long)
                zeros = torch.zeros(len(sequences[i]), dtype=torch.float32, device=device)
                logps[i] = zeros.index_put((positions,), sel_logp[start : start + n])
                if return_entropy:
                    entropies[i] = zeros.index_put((positions,), sel_ent[start : start + n])
                start += n
        return logps, entropies if return_entropy else None

    def _head_logprobs(
        self, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, *, with_grad: bool, entropy: bool
    ) -> tuple[torch.Tensor, ...]:
        """``(log-probs,)`` of ``targets`` after ``hidden``, plus the entropies when ``entropy``."""
        lm_head = self.forward.lm_head

        def head(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
            logits = lm_head(h).float()
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

    def next_token_logprobs(self, contexts: list[list[int]]) -> torch.Tensor:
        """Log-probs of the next token after each context: a float32 CPU tensor
        ``[len(contexts), vocab]``."""
        forward = self.forward
        out = torch.empty(len(contexts), forward.vocab_size, dtype=torch.float32)
        lengths = [len(c) for c in contexts]
        if forward.share_prefixes and forward.supports_prefix_cache:
            # A verifier asks several questions about one attempt: the contexts share all but
            # their last lines, and each shared prefix is encoded once per micro-batch (rows in
            # sorted order, so that contexts with a common prefix land in the same one).
            in_order = sorted(range(len(contexts)), key=lambda i: contexts[i])
            for batch in micro_batches(in_order, lengths, self.token_budget):
                logits = forward.prefill([contexts[i] for i in batch], None, 0)[0]
                out[batch] = torch.log_softmax(logits, dim=-1).cpu()
            return out
        for batch in micro_batches(longest_first(lengths), lengths, self.token_budget):
            rows = [contexts[i] for i in batch]
            hidden = forward.hidden(rows)
            rows_t = torch.arange(len(rows), device=forward.device)
            last = hidden[rows_t, torch.tensor([len(r) - 1 for r in rows], device=forward.device)]
            out[batch] = torch.log_softmax(forward.lm_head(last).float(), dim=-1).cpu()
        return out
