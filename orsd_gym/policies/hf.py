"""`HFPolicy`: the `Policy` protocol on a transformers causal LM (CPU or CUDA, optional LoRA).

Composed of a `CachedForward` (the decoder and LM head over padded rows with prefix caches), a
`Sampler` (the decode loop) and a `Scorer` (log-probs in micro-batches); this class adds the
precision each call computes in, input checks and the weights' I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from orsd_gym.policies.base import Completion, Precision, SamplingParams
from orsd_gym.policies.chat import ChatRenderer
from orsd_gym.policies.forward import CachedForward, checked_token_ids
from orsd_gym.policies.kvcache import KVSession
from orsd_gym.policies.lora import LoRASettings, wrap_lora
from orsd_gym.policies.memory_model import llama_generation_bytes, llama_update_activation_bytes
from orsd_gym.policies.precision import compute_dtype, computing_in, copy_in_dtype, resolve_dtype
from orsd_gym.policies.sampler import Sampler, stop_token_ids
from orsd_gym.policies.scorer import Scorer
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.profiling import phase
from orsd_gym.writable import write_with

__all__ = ["HFPolicy", "LoRASettings", "PolicySettings", "load_pretrained", "resolve_dtype"]


def load_pretrained(source: str, *, device: str, dtype: str | torch.dtype, attn_implementation: str | None):
    """``(model, tokenizer)`` from a ``from_pretrained`` directory or hub id, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # The per-tensor "Loading weights" bar would interleave with our own progress views.
    hf_logging.disable_progress_bar()
    kwargs: dict[str, Any] = {"dtype": resolve_dtype(dtype, device)}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs).to(device)
    tokenizer = AutoTokenizer.from_pretrained(source)
    model.eval()
    return model, tokenizer


def _setting_of(part: str, name: str) -> property:
    return property(
        lambda self: getattr(getattr(self, part), name),
        lambda self, value: setattr(getattr(self, part), name, value),
    )


class HFPolicy:
    """A transformers causal LM behind the `Policy` protocol.

    ``settings`` (`PolicySettings`) hold the sampling seed, the chat template's settings and
    the memory and speed knobs: ``token_budget`` caps ``rows * padded_length`` of one `score` /
    `next_token_logprobs` micro-batch; ``logits_chunk`` is how many positions go through the LM
    head at once (see `Scorer`); ``share_prefixes`` encodes once a prefix several rows of one
    call share. ``inference_dtype`` / ``update_dtype`` compute below the weights' dtype through
    autocast (`score`'s ``precision`` picks one, or the weights' own).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        settings: PolicySettings | None = None,
        *,
        lora: LoRASettings | dict[str, Any] | None = None,
        name: str = "",
        inference_dtype: str | torch.dtype | None = None,
        update_dtype: str | torch.dtype | None = None,
    ) -> None:
        settings = settings or PolicySettings()
        gradient_checkpointing = settings.gradient_checkpointing
        if gradient_checkpointing:
            # Updates keep only each decoder layer's input and recompute the layer on backward
            # (benchmarks/README.md: the activations it saves). Only active in train mode, so
            # sampling and scoring are unaffected.
            no_reentrant = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=no_reentrant)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=no_reentrant)
        self.gradient_checkpointing = gradient_checkpointing
        self.model = wrap_lora(model, lora) if lora is not None else model
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._tokenizer = tokenizer
        self.name = name
        self.seed = settings.seed
        self._chat = ChatRenderer(tokenizer, settings.chat_template_kwargs)
        self.forward = CachedForward(self.model, tokenizer.pad_token_id, share_prefixes=settings.share_prefixes)
        self.scorer = Scorer(self.forward, token_budget=settings.token_budget, logits_chunk=settings.logits_chunk)
        self.sampler = Sampler(
            self.forward, tokenizer, stop_token_ids(self.model, tokenizer), settings.seed, self.generation_bytes
        )
        self.device = self.forward.device
        weights_dtype = self.weights_dtype
        #: The dtype sampling and scoring without gradients compute in.
        self.inference_dtype = compute_dtype(inference_dtype, weights_dtype, self.device.type, "inference_dtype")
        #: The dtype updates compute in, and with it what a loss compares its forward with:
        #: `score(..., precision="update")`.
        self.update_dtype = compute_dtype(update_dtype, weights_dtype, self.device.type, "update_dtype")

    # A setting of one of the parts, read and written through the policy.
    token_budget = _setting_of("scorer", "token_budget")
    logits_chunk = _setting_of("scorer", "logits_chunk")
    share_prefixes = _setting_of("forward", "share_prefixes")
    stop_token_ids = _setting_of("sampler", "stop_token_ids")
    #: Bytes one `generate` call may add besides the sessions it is given (None: no budget, one
    #: batch); a trainer sets it from ``optim.max_memory_gb``.
    generation_budget = _setting_of("sampler", "memory_budget")

    # ------------------------------------------------------------------ protocol: tokens
    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def chat(self) -> ChatRenderer:
        return self._chat

    @property
    def supports_prefix_cache(self) -> bool:
        return self.forward.supports_prefix_cache

    @property
    def max_positions(self) -> int:
        return self.forward.max_positions

    @property
    def vocab_size(self) -> int:
        return self.forward.vocab_size

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of sampling and of scoring without gradients (`inference_dtype`)."""
        return self.inference_dtype

    @property
    def weights_dtype(self) -> torch.dtype:
        return self.forward.lm_head.weight.dtype

    def new_session(self) -> KVSession:
        return KVSession()

    def _computing(self, *, grad: bool = False, precision: Precision | None = None) -> Any:
        """Gradients on or off and the dtype of ``precision`` (`Policy.score`; None: "update"
        with gradients, "inference" without)."""
        dtypes = {"inference": self.inference_dtype, "update": self.update_dtype, "weights": self.weights_dtype}
        precision = precision or ("update" if grad else "inference")
        if precision not in dtypes:
            raise ValueError(f"precision={precision!r}; choose one of {sorted(dtypes)}")
        return computing_in(self.device.type, dtypes[precision], self.weights_dtype, grad=grad)

    # ------------------------------------------------------------------ protocol: sampling and scoring
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
        its own generator, so a row samples the same tokens whatever else is in the batch, and
        whether `generation_budget` splits the call into chunks or not.
        """
        contexts = checked_token_ids(contexts, self.vocab_size, "contexts")
        with self._computing():
            return self.sampler.generate(contexts, params, sessions, seeds)

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
        """See `Policy.score`. With ``loss_masks`` only mask-1 positions are computed (others 0).

        Tensors are float32 on the policy's device.
        """
        sequences = checked_token_ids(sequences, self.vocab_size, "sequences")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for scoring, got {temperature}")
        computing = self._computing(grad=with_grad, precision=precision)
        with computing, phase("forward" if with_grad else "score"):
            logps, entropies = self.scorer.score(
                sequences, loss_masks, with_grad=with_grad, return_entropy=return_entropy, temperature=temperature
            )
        return (logps, entropies) if entropies is not None else logps

    def next_token_logprobs(self, contexts: Sequence[Sequence[int]]) -> torch.Tensor:
        """See `Policy.next_token_logprobs`; a float32 CPU tensor ``[len(contexts), vocab]``."""
        contexts = checked_token_ids(contexts, self.vocab_size, "contexts")
        with self._computing(), phase("score"):
            return self.scorer.next_token_logprobs(contexts)

    # ------------------------------------------------------------------ protocol: memory
    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def update_weight_copy_bytes(self) -> int:
        """See `Policy.update_weight_copy_bytes`."""
        narrow = self.update_dtype.itemsize
        return sum(p.numel() * narrow for p in self.model.parameters() if p.element_size() > narrow)

    def update_activation_bytes(self, rows: int, length: int) -> int:
        """See `Policy.update_activation_bytes` (`llama_update_activation_bytes`)."""
        return llama_update_activation_bytes(
            self.forward.config,
            rows=rows,
            length=length,
            width=self.update_dtype.itemsize,
            gradient_checkpointing=self.gradient_checkpointing,
            logits_chunk=self.logits_chunk,
            vocab_size=self.vocab_size,
        )

    def generation_bytes(self, rows: int, length: int) -> int:
        """Bytes generating ``rows`` rows of at most ``length`` positions adds
        (`llama_generation_bytes`)."""
        return llama_generation_bytes(
            self.forward.config,
            rows=rows,
            length=length,
            width=self.inference_dtype.itemsize,
            vocab_size=self.vocab_size,
        )

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
        tensors = {k: v.contiguous().cpu() for k, v in self.state_dict().items()}
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        write_with(
            path,
            "the weights",
            lambda partial: save_file(tensors, str(partial), metadata={"model": self.name}),
            size=size,
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
        settings = PolicySettings(
            seed=self.seed,
            chat_template_kwargs=self._chat.template_kwargs,
            token_budget=self.token_budget,
            logits_chunk=self.logits_chunk,
            share_prefixes=self.share_prefixes,
        )
        frozen = HFPolicy(
            copy_in_dtype(self.model, inference_dtype),
            self._tokenizer,
            settings,
            name=self.name,
            inference_dtype=inference_dtype,
            update_dtype=update_dtype,
        )
        return frozen.freeze()
