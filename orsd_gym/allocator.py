"""Have the C allocator give freed tensor memory back to the operating system.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves large requests with
their own memory mappings (returned on ``free``) but raises that threshold, up to 32 MiB, each
time such a block is freed; from then on tensors of a few MiB come from the heap, which a
training step's mix of sizes fragments: freed memory stays resident and the process's peak
grows well past what is live (measured: benchmarks/README.md). A fixed threshold turns that
adjustment off, so every block of at least that size is mapped on allocation and unmapped on
free. A decode step allocates nothing that large (the KV cache reserves its room once per call,
`orsd_gym.policies.kvcache`), so generation pays no page faults for it.

Smaller blocks still come from the heap, and a parameter-sized tensor of SmolLM2 is often one
(most of its weight matrices are 0.4 to 3.5 MiB): an update's gradients and activations leave
hundreds of MB of freed heap behind, which glibc keeps resident for reuse. `trim_heap` hands
those free pages back; the trainer calls it between the phases of an iteration, where the next
phase's mix of sizes would otherwise stack its own peak on top of the last one's leftovers
(how much comes back: benchmarks/README.md).

A process-wide setting: the trainer applies both (``train.return_freed_memory``); other
programs may call them themselves. No-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

#: Allocations of at least this many bytes get their own mapping.
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt parameter numbers, from glibc's malloc.h


def return_freed_memory(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold_bytes``; False where that is not possible."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, threshold_bytes) == 1


def trim_heap() -> bool:
    """Give the heap's free pages back to the operating system (glibc's ``malloc_trim``);
    False where that is not possible or nothing came back."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    return malloc_trim(0) == 1


@functools.cache  # finding the library runs ldconfig
def _libc_function(name: str):
    """A function of the C library, or None where there is no such library or function."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        return getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
