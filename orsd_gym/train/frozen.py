"""The frozen models an algorithm asks for: a KL reference and a verifier."""

from __future__ import annotations

from typing import Any

from orsd_gym.policies.models import load_policy
from orsd_gym.train.config import ModelConfig


def frozen_models(policy: Any, model: ModelConfig, algo_config: Any, device: str) -> tuple[Any, Any]:
    """``(reference, verifier)``, each None unless ``algo_config`` needs it: frozen copies of the
    weights training starts from. Taken before a checkpoint is loaded, so a resumed run judges
    with the same models. The KL reference enters the loss: it keeps the policy's weights dtype
    and update dtype. The verifier is ``model.verifier`` when set, else the policy, held in
    ``model.verifier_dtype``."""
    reference = policy.copy_frozen(model.dtype) if algo_config.needs_reference else None
    verifier = None
    if algo_config.needs_verifier:
        judge = (
            load_policy(model.verifier, device=device, dtype=model.dtype, inference_dtype=model.inference_dtype)
            if model.verifier
            else policy
        )
        verifier = judge.copy_frozen(model.verifier_dtype)
    return reference, verifier
