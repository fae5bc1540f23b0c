"""One micro-batcher for every padded forward pass: sampling's prefix sharing, scoring and
the update all split rows the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence


def micro_batches(
    order: Iterable[int],
    lengths: Sequence[int],
    token_budget: int,
    fits: Callable[[int, int], bool] | None = None,
) -> list[list[int]]:
    """Split the row indices in ``order`` into consecutive groups whose padded size (rows x
    longest of ``lengths``) is at most ``token_budget`` and, when given, ``fits(rows, longest)``
    (a memory budget). A row that fits neither on its own still gets a micro-batch of its own.

    The order is the caller's choice: longest first packs rows of similar length together;
    sorted by content puts rows with a common prefix in the same micro-batch."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        rows, wider = len(current) + 1, max(longest, lengths[index])
        if current and (rows * wider > token_budget or (fits is not None and not fits(rows, wider))):
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, lengths[index])
    if current:
        batches.append(current)
    return batches


def longest_first(lengths: Sequence[int]) -> list[int]:
    """Row indices, longest first (ties keep their order)."""
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])
