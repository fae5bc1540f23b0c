"""Dtypes a policy holds its weights in and computes in (autocast can only narrow)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

_NAMES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """A torch dtype from its name; ``auto`` is bfloat16 on CUDA, float32 elsewhere."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    if dtype not in _NAMES:
        raise ValueError(f"dtype={dtype!r}; choose 'auto' or one of {sorted(_NAMES)}")
    return _NAMES[dtype]


def compute_dtype(dtype: str | torch.dtype | None, weights: torch.dtype, device_type: str, name: str) -> torch.dtype:
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
def computing_in(device_type: str, dtype: torch.dtype, weights: torch.dtype, *, grad: bool) -> Iterator[None]:
    """Gradients on or off, and autocast to ``dtype`` where it differs from the weights'."""
    with torch.enable_grad() if grad else torch.no_grad():
        if dtype == weights:
            yield
        else:
            with torch.autocast(device_type, dtype=dtype):
                yield


def copy_in_dtype(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A deep copy of ``model`` whose parameters are made in ``dtype`` (tied ones stay tied;
    buffers keep theirs). Copying first and converting after would hold a second full-precision
    copy for a moment, whose freed pages the C allocator mostly keeps resident."""
    memo: dict[int, Any] = {}
    for parameter in model.parameters():
        memo[id(parameter)] = torch.nn.Parameter(parameter.detach().to(dtype, copy=True), requires_grad=False)
    return copy.deepcopy(model, memo)
