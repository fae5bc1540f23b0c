"""The LLM-policy interface every algorithm talks to.

Algorithms (GRPO, ORSD, ...) and the rollout collector depend only on `Policy`; a backend
(`HFPolicy` on transformers, later vLLM or Ray actors) implements it. Token sequences are plain
lists of ints so that trajectories stay backend-neutral and JSON-serialisable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # keep `import orsd_gym.policies.base` free of torch
    import torch

FinishReason = Literal["stop", "eos", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How `Policy.generate` samples. ``temperature=0`` means greedy decoding."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    #: Seed of the torch Generator used for sampling (None: the backend's own generator).
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Completion:
    """One sampled continuation of a context."""

    token_ids: list[int]
    #: Log-probability of each sampled token under the distribution it was sampled from
    #: (after temperature / top-p), aligned with `token_ids`.
    logprobs: list[float]
    text: str
    finish_reason: FinishReason
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """What algorithms and rollouts may ask of a model."""

    @property
    def tokenizer(self) -> Any:
        """A Hugging Face-style tokenizer (``encode``/``decode``/``apply_chat_template``)."""

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes in (float32 makes cached decoding and scoring agree)."""

    def render_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool, thinking: bool | None = None
    ) -> list[int]:
        """Token ids of ``messages`` rendered with the model's chat template.

        ``thinking`` turns the template's reasoning switch (Qwen3's ``enable_thinking``) on or
        off where it has one; None keeps the policy's own setting (what rollouts use).
        """

    def generate(self, contexts: Sequence[Sequence[int]], params: SamplingParams) -> list[Completion]:
        """Sample one completion per context (batched)."""

    def score(
        self,
        sequences: Sequence[Sequence[int]],
        loss_masks: Sequence[Sequence[int]] | None = None,
        *,
        with_grad: bool = False,
        return_entropy: bool = False,
        temperature: float = 1.0,
    ) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-token log-probabilities of each sequence under the current weights.

        Returns one float tensor per sequence, of the sequence's length: entry ``t`` is
        ``log p(seq[t] | seq[:t])`` with logits divided by ``temperature`` (entry 0 is 0, it
        has no context). Positions whose loss mask is 0 may be left at 0. Batched in
        micro-batches under a token budget. With ``return_entropy`` also returns the per-token
        entropy of the predictive distribution. With ``with_grad`` the tensors carry gradients
        to `trainable_parameters` (the caller backpropagates micro-batch by micro-batch).
        """

    def next_token_logprobs(self, contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Log-softmax of the next-token distribution after each context: ``[len(contexts), vocab]``.

        Used by verifiers that read P("yes") without generating. Batched like `score`.
        """

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Parameters the optimiser updates (LoRA adapters only, when LoRA is on)."""

    def set_training(self, mode: bool) -> None:
        """Train mode (dropout on, e.g. LoRA's) for updates; eval mode for sampling and scoring."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Trainable weights (what a checkpoint must store to restore this policy)."""

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore weights saved by `state_dict`."""

    def copy_frozen(self) -> Policy:
        """An independent frozen copy (no grad, eval mode): reference models and verifiers."""
