"""LoRA adapters (peft) on a transformers model."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoRASettings:
    """peft LoRA adapters on the attention projections (what `load_policy(lora=...)` takes)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


def wrap_lora(model: Any, lora: LoRASettings | dict[str, Any]) -> Any:
    """``model`` with trainable LoRA adapters and its own weights frozen, in eval mode (peft
    leaves its new modules in train mode, whose dropout would act while sampling)."""
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
        return get_peft_model(model, config).eval()
