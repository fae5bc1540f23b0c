"""Micro-batches sized by a memory budget (optim.max_memory_gb), and the estimate behind it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from orsd_gym.algos import make_algorithm  # noqa: E402
from orsd_gym.errors import MemoryBudgetError  # noqa: E402
from orsd_gym.policies.batching import micro_batches  # noqa: E402
from orsd_gym.train.config import OptimConfig  # noqa: E402
from orsd_gym.train.update import (  # noqa: E402
    RUNTIME_ALLOWANCE_GB,
    activation_budget,
    make_optimizer,
)


def test_micro_batches_respect_both_budgets():
    trajs = [100, 100, 100, 100, 300]  # row lengths
    assert micro_batches(range(5), trajs, token_budget=10_000) == [[0, 1, 2, 3, 4]]
    # At most two rows, whatever the tokens allow; a row that fits nothing still goes alone.
    two_rows = lambda rows, length: rows <= 2  # noqa: E731
    assert micro_batches(range(5), trajs, 10_000, two_rows) == [[0, 1], [2, 3], [4]]
    assert micro_batches(range(5), trajs, 10_000, lambda rows, length: False) == [[0], [1], [2], [3], [4]]
    assert micro_batches(range(5), trajs, 250) == [[0, 1], [2, 3], [4]]


def test_activation_estimate_grows_with_rows_and_length_and_checkpointing_shrinks_it(policy):
    estimate = policy.update_activation_bytes
    assert estimate(2, 512) > estimate(1, 512) and estimate(1, 1024) > estimate(1, 512)
    saved = policy.gradient_checkpointing
    try:
        policy.gradient_checkpointing = True
        with_checkpointing = estimate(8, 1024)
        policy.gradient_checkpointing = False
        assert estimate(8, 1024) > with_checkpointing
    finally:
        policy.gradient_checkpointing = saved
    assert policy.weight_bytes() == sum(p.numel() * 4 for p in policy.model.parameters())


def test_activation_budget_counts_the_training_state_and_fails_fast(policy):
    grpo = make_algorithm("grpo")
    assert activation_budget(policy, grpo, OptimConfig()) is None
    state = 4 * policy.weight_bytes()  # weights, gradients, AdamW's two moments (all trainable)
    budget = activation_budget(policy, grpo, OptimConfig(max_memory_gb=RUNTIME_ALLOWANCE_GB + 1.0))
    assert budget == int(1e9) - state
    orsd = make_algorithm("orsd", verifier=policy.copy_frozen())
    assert activation_budget(policy, orsd, OptimConfig(max_memory_gb=RUNTIME_ALLOWANCE_GB + 1.0)) == budget - (
        policy.weight_bytes()
    )
    # A bfloat16 verifier holds half the bytes, and the budget gives them to activations.
    lean = make_algorithm("orsd", verifier=policy.copy_frozen("bfloat16"))
    assert lean.verifier.weight_bytes() == policy.weight_bytes() // 2
    assert activation_budget(policy, lean, OptimConfig(max_memory_gb=RUNTIME_ALLOWANCE_GB + 1.0)) == budget - (
        policy.weight_bytes() // 2
    )
    with pytest.raises(MemoryBudgetError, match="max_memory_gb=0.81 leaves"):
        activation_budget(policy, grpo, OptimConfig(max_memory_gb=RUNTIME_ALLOWANCE_GB + 0.01))


def test_a_memory_budget_steps_adamw_one_tensor_at_a_time(policy):
    # foreach AdamW's temporaries are as large as all the weights: the update's peak otherwise.
    budgeted, _ = make_optimizer(policy, OptimConfig(max_memory_gb=4), total_steps=1)
    unbudgeted, _ = make_optimizer(policy, OptimConfig(), total_steps=1)
    assert budgeted.param_groups[0]["foreach"] is False
    assert unbudgeted.param_groups[0]["foreach"] is None


_FRAGMENTED_HEAP = """
import torch
from orsd_gym.allocator import return_freed_memory, trim_heap

def resident():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

return_freed_memory()
# 64 MB in 128 KiB tensors (each under the mmap threshold, so from the heap), every eighth kept:
# the freed ones are holes the heap cannot shrink past.
tensors = [torch.ones(32 * 1024) for _ in range(512)]
kept = tensors[7::8]
del tensors
before = resident()
returned = trim_heap()
print(returned, before - resident())
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not os.path.exists("/proc/self/statm"),
    reason="trim_heap needs glibc and /proc",
)
def test_trim_heap_returns_freed_heap_pages():
    # In a fresh process: this one's heap holds whatever earlier tests left.
    out = subprocess.run([sys.executable, "-c", _FRAGMENTED_HEAP], capture_output=True, text=True, check=True)
    returned, released = out.stdout.split()
    assert returned == "True"
    assert int(released) > 40e6  # of the 56 MB freed


def test_the_budget_counts_autocasts_copies_of_the_weights_in_a_narrower_update_dtype():
    """Mixed precision (bf16 compute over float32 weights) holds a bf16 copy of every weight
    while an update's forward and backward run: the budget leaves that much less to activations."""
    from orsd_gym.algos.base import make_algorithm
    from orsd_gym.policies.models import load_policy
    from orsd_gym.train.config import OptimConfig
    from orsd_gym.train.update import activation_budget

    full = load_policy("tiny-random")
    mixed = load_policy("tiny-random", update_dtype="bfloat16")
    assert full.update_weight_copy_bytes() == 0
    assert mixed.update_weight_copy_bytes() == full.weight_bytes() // 2
    grpo, optim = make_algorithm("grpo"), OptimConfig(max_memory_gb=2.0)
    assert activation_budget(full, grpo, optim) - activation_budget(mixed, grpo, optim) == full.weight_bytes() // 2
