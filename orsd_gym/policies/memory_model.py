"""How many bytes one update micro-batch's forward and backward add, for a Llama-style decoder
(SmolLM2, Qwen, Llama: pre-norm attention and a gated MLP). Calibrated against measured peaks
in benchmarks/perf/iteration_profile.py; another architecture needs its own model here."""

from __future__ import annotations

from typing import Any


def llama_update_activation_bytes(
    config: Any,
    *,
    rows: int,
    length: int,
    width: int,
    gradient_checkpointing: bool,
    logits_chunk: int,
    vocab_size: int,
) -> int:
    """Per token: each layer's input (with gradient checkpointing) or all of a layer's saved
    activations (without), plus one layer's activations and their gradients while it is
    recomputed, and the final hidden states; per micro-batch: the padding mask's
    ``[rows, length, length]`` booleans and one LM-head chunk (its logits, their exponentials
    and gradient, in float32). ``width`` is the bytes per element the update computes in."""
    hidden, inner = int(config.hidden_size), int(config.intermediate_size)
    # A Llama-style layer keeps about 12 hidden-wide and 5 MLP-wide tensors per token.
    layer = (12 * hidden + 5 * inner) * width
    kept = int(config.num_hidden_layers) * (hidden * width if gradient_checkpointing else layer)
    tokens = rows * length
    head = min(logits_chunk, tokens) * vocab_size * 4 * 4
    return tokens * (kept + 2 * layer + 3 * hidden * width) + rows * length * length + head


def llama_generation_bytes(config: Any, *, rows: int, length: int, width: int, vocab_size: int) -> int:
    """Bytes one `generate` call of ``rows`` rows, each at most ``length`` positions (context
    plus new tokens), adds: the batch cache's keys and values and the sessions' copies of them,
    and the prefill's largest transient, one layer's activations and attention weights over
    every row's tokens (counted as if none were cached: an upper bound), plus the next-token
    logits and their sampling copies. ``width`` is the bytes per element sampling computes in."""
    hidden, inner = int(config.hidden_size), int(config.intermediate_size)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    kv_per_token = int(config.num_hidden_layers) * 2 * kv_heads * head_dim * width
    tokens = rows * length
    layer = tokens * (12 * hidden + 5 * inner) * width
    # Attention weights in float32 and their softmax (the math path of scaled-dot-product attention).
    scores = rows * heads * length * length * 4 * 2
    logits = rows * vocab_size * 4 * 4
    return 2 * tokens * kv_per_token + layer + scores + logits
