"""Have the C allocator give freed tensor memory back to the operating system.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves large requests with
their own memory mappings (returned on ``free``) but raises that threshold, up to 32 MiB, each
time such a block is freed; from then on tensors of a few MiB come from the heap, which a
training step's mix of sizes fragments: freed memory stays resident and the process's peak
grows well past what is live. Measured on an update of SmolLM2-135M (4 x 680 tokens, gradient
checkpointing): peak growth 1.5-1.8 GB with the default, 0.47 GB with a fixed 4 MiB threshold
(benchmarks/README.md). A fixed threshold turns that adjustment off, so every block of at least
that size is mapped on allocation and unmapped on free. A decode step allocates nothing that
large (the KV cache reserves its room once per call, `orsd_gym.policies.kvcache`), so
generation pays no page faults for it.

A process-wide setting: the trainer applies it (``train.return_freed_memory``); other programs
may call `return_freed_memory` themselves. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: Allocations of at least this many bytes get their own mapping.
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt parameter numbers, from glibc's malloc.h


def return_freed_memory(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold_bytes``; False where that is not possible."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, threshold_bytes) == 1
