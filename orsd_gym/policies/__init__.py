"""The generic LLM-policy interface and its backends.

``from orsd_gym.policies import load_policy`` is cheap: the transformers backend (and torch)
is imported on first use of `load_policy` / `HFPolicy`.
"""

from __future__ import annotations

from typing import Any

from orsd_gym.errors import ModelNotFoundError
from orsd_gym.policies.base import Completion, Policy, SamplingParams
from orsd_gym.policies.settings import PolicySettings

_LAZY = {
    "load_policy": "orsd_gym.policies.models",
    "HFPolicy": "orsd_gym.policies.hf",
    "KVSession": "orsd_gym.policies.kvcache",
    "LoRASettings": "orsd_gym.policies.lora",
}

__all__ = ["Completion", "ModelNotFoundError", "Policy", "PolicySettings", "SamplingParams", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'orsd_gym.policies' has no attribute {name!r}")
