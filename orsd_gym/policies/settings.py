"""`PolicySettings`: how an `HFPolicy` samples and computes, besides its weights and precision.

One record for what `orsd_gym.policies.load_policy` and `HFPolicy` take beyond the model, its
device and dtypes and LoRA: the sampling seed, the chat template's settings, and the memory and
speed knobs of scoring and updates. Importing it needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PolicySettings:
    """Settings of an `HFPolicy` (the defaults are `load_policy`'s)."""

    #: Seeds the policy's own sampling Generator (used when `SamplingParams.seed` is None).
    seed: int = 0
    #: Keywords of the tokenizer's chat template (e.g. ``{"enable_thinking": False}``).
    chat_template_kwargs: dict[str, Any] | None = None
    #: Caps ``rows * padded_length`` of one scoring micro-batch (a trainer passes its
    #: ``optim.micro_batch_tokens``).
    token_budget: int = 16_384
    #: Positions that go through the LM head at once (`orsd_gym.policies.scorer.Scorer`).
    logits_chunk: int = 256
    #: Updates keep only each decoder layer's input and recompute the layer on backward.
    gradient_checkpointing: bool = False
    #: Encode once a prefix that several rows of one call share (same tokens).
    share_prefixes: bool = True
