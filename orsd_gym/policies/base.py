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

    from orsd_gym.policies.chat import ChatRenderer

FinishReason = Literal["stop", "eos", "length"]
#: What a `Policy.score` pass computes in (see there).
Precision = Literal["inference", "update", "weights"]


@dataclass(frozen=True)
class SamplingParams:
    """How `Policy.generate` samples. ``temperature=0`` means greedy decoding."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    #: Seed of the torch Generator used for sampling (None: the backend's own generator), for
    #: calls that give no per-row ``seeds`` (`Policy.generate`); `orsd_gym.rollout.collect`
    #: derives each episode's per-row seeds from it (None: 0).
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
    """Everything algorithms and rollouts may ask of a model; a backend implements all of it.

    Multi-turn rollouts keep one *session* per episode (`new_session`): an opaque handle the
    backend may use to reuse the work of the episode's previous turns (the transformers backend
    keeps the prefix's keys and values, so a turn encodes only the tokens added since). A
    session is never wrong, only more or less useful: generating without one gives the same
    tokens for the same seed.
    """

    @property
    def tokenizer(self) -> Any:
        """A Hugging Face-style tokenizer (``encode``/``decode``/``apply_chat_template``)."""

    @property
    def chat(self) -> ChatRenderer:
        """The model's chat template with the policy's template settings (thinking on/off)."""

    @property
    def dtype(self) -> torch.dtype:
        """The dtype sampling and scoring without gradients compute in (float32 makes cached
        decoding and scoring agree)."""

    @property
    def update_dtype(self) -> torch.dtype:
        """The dtype updates compute in. What a loss compares its forward with (PPO's old
        log-probs, a KL reference's) is scored in it too (``score(..., precision="update")``),
        so a loss compares numbers computed alike."""

    @property
    def max_positions(self) -> int:
        """The longest token sequence the model can attend over (context plus generation)."""

    def new_session(self) -> Any:
        """A fresh generation session for one multi-turn episode (see the class docstring)."""

    def generate(
        self,
        contexts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        sessions: Sequence[Any] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Sample one completion per context (batched); ``sessions``: one per context, or None.

        ``seeds`` (one per context, optional) gives each row its own sampling stream, so what a
        row samples does not depend on which other rows share the batch (``params.seed`` is
        then not used); this is what makes an episode's tokens independent of how many env
        slots or training workers play the other episodes.
        """

    def score(
        self,
        sequences: Sequence[Sequence[int]],
        loss_masks: Sequence[Sequence[int]] | None = None,
        *,
        with_grad: bool = False,
        return_entropy: bool = False,
        temperature: float = 1.0,
        precision: Precision | None = None,
    ) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-token log-probabilities of each sequence under the current weights.

        Returns one float tensor per sequence, of the sequence's length: entry ``t`` is
        ``log p(seq[t] | seq[:t])`` with logits divided by ``temperature`` (entry 0 is 0, it
        has no context). Positions whose loss mask is 0 may be left at 0. Batched in
        micro-batches under a token budget: in a 16-bit dtype a row's log-probs depend on the
        rows it is padded with, so two calls round alike only when given the same rows in the
        same order. With ``return_entropy`` also returns the per-token entropy of the predictive
        distribution. With ``with_grad`` the tensors carry gradients to `trainable_parameters`
        (the caller backpropagates micro-batch by micro-batch).

        ``precision`` is what the pass computes in: "inference" (`dtype`), "update"
        (`update_dtype`) or "weights" (the weights' own dtype, no autocast: float32 in every
        mixed-precision setting); None: "update" with ``with_grad``, else "inference".
        """

    def next_token_logprobs(self, contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        """Log-softmax of the next-token distribution after each context: ``[len(contexts), vocab]``.

        Used by verifiers that read P("yes") without generating. Batched like `score`.
        """

    def weight_bytes(self) -> int:
        """Bytes the model's weights take (every parameter, trainable or frozen)."""

    def update_activation_bytes(self, rows: int, length: int) -> int:
        """Estimated peak bytes a forward and backward pass (`score` with grad) over ``rows``
        sequences padded to ``length`` tokens adds: activations kept for backward, the
        recomputation of one layer, the LM-head chunks. Weights, gradients and optimiser state
        are not included. Used to size update micro-batches under a memory budget."""

    def update_weight_copy_bytes(self) -> int:
        """Bytes an update's forward and backward hold besides the weights whatever their
        micro-batch: copies of the weights in `update_dtype` where it is narrower than theirs
        (autocast caches them, and the graph keeps them for backward); 0 without autocast."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Parameters the optimiser updates (LoRA adapters only, when LoRA is on)."""

    def set_training(self, mode: bool) -> None:
        """Train mode (dropout on, e.g. LoRA's) for updates; eval mode for sampling and scoring."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Trainable weights (what a checkpoint must store to restore this policy)."""

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore weights saved by `state_dict`."""

    def copy_frozen(self, dtype: str | torch.dtype | None = None) -> Policy:
        """An independent frozen copy (no grad, eval mode): reference models and verifiers.
        ``dtype`` (None: the policy's inference dtype) is what the copy holds and computes in;
        a copy in the policy's own weights dtype keeps its `update_dtype` too."""
