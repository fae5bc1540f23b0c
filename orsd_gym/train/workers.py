"""The data-parallel world a training process belongs to: its rank, and the collectives training needs.

A run with ``train.workers = N`` is N processes, each a full replica of the policy (started by
Ray Train's ``TorchTrainer`` or by ``torchrun``: `orsd_gym.train.launch`). Worker r plays a
contiguous share of each iteration's task groups (`Workers.share`), so a group never spans
workers and its advantages (GRPO's, ORSD's rubric) are computed where it was played; the update
all-reduces the gradients before every optimiser step (`Workers.all_reduce_gradients`), so the
replicas stay identical. Only worker 0 reads and writes the run directory (metrics, audit,
checkpoints); the others send it what it writes (`Workers.gather`) and receive what it reads
(`Workers.on_main`), so no storage needs to be shared between machines.

A single process is the world of one (`SINGLE`): every collective is then the identity, and
the single-process path runs exactly the code it ran before data parallelism existed.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")

#: Gradients are all-reduced in buckets of at most this many elements (DDP's default bucket is
#: 25 MB), so the update never holds a second copy of every gradient.
BUCKET_ELEMENTS = 25 * 2**20 // 4


@dataclass(frozen=True)
class Workers:
    """This process's place in the data-parallel world (see the module docstring)."""

    rank: int = 0
    size: int = 1
    #: Rank among the workers of this machine: the GPU a worker uses is ``cuda:<local_rank>``.
    local_rank: int = 0

    @classmethod
    def from_process_group(cls) -> Workers:
        """The world of the initialised default process group (the one process if there is none)."""
        if not dist.is_available() or not dist.is_initialized():
            return SINGLE
        return cls(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        """Worker 0: the one that reads and writes the run directory."""
        return self.rank == 0

    def share(self, count: int) -> range:
        """The indices of ``count`` items (an iteration's task groups) this worker plays:
        contiguous, the first ``count % size`` workers one more than the others."""
        base, extra = divmod(count, self.size)
        start = self.rank * base + min(self.rank, extra)
        return range(start, start + base + (self.rank < extra))

    def most(self, count: int) -> int:
        """The largest share of ``count`` items any worker gets."""
        return -(-count // self.size)

    def device(self, name: str) -> str:
        """The device a configured ``model.device`` means for this worker (its own GPU)."""
        if self.size > 1 and name == "cuda":
            return f"cuda:{self.local_rank}"
        return name

    def stream(self) -> tuple[int, ...]:
        """What splits a random stream per worker: nothing on worker 0, so a single process
        draws exactly what it always drew; the rank elsewhere."""
        return (self.rank,) if self.rank else ()

    # ------------------------------------------------------------------ objects
    def on_main(self, fn: Callable[[], T]) -> T:
        """``fn()`` run by worker 0 alone, its result (or the exception it raised) sent to every
        worker: what only worker 0 may do (claim the run directory, read a checkpoint)."""
        if self.size == 1:
            return fn()
        outcome: tuple[bool, Any] | None = None
        if self.is_main:
            try:
                outcome = (True, fn())
            except Exception as error:  # every worker raises it, not only worker 0
                outcome = (False, _picklable(error))
        box = [outcome]
        dist.broadcast_object_list(box, src=0)
        succeeded, value = box[0]
        if not succeeded:
            raise value
        return value

    def gather(self, value: T) -> list[T] | None:
        """Every worker's ``value`` on worker 0, in rank order (None on the others)."""
        if self.size == 1:
            return [value]
        out: list[Any] | None = [None] * self.size if self.is_main else None
        dist.gather_object(value, out, dst=0)
        return out

    def all_gather(self, value: T) -> list[T]:
        """Every worker's ``value`` on every worker, in rank order."""
        if self.size == 1:
            return [value]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, value)
        return out

    # ------------------------------------------------------------------ tensors
    def sum(self, values: Mapping[str, float]) -> dict[str, float]:
        """``values`` summed over the workers (every worker must pass the same keys)."""
        if self.size == 1:
            return dict(values)
        keys = sorted(values)
        totals = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self._device())
        dist.all_reduce(totals)
        return {k: float(v) for k, v in zip(keys, totals.tolist(), strict=True)}

    def broadcast_parameters(self, parameters: Sequence[torch.Tensor]) -> None:
        """Worker 0's values of ``parameters`` on every worker (what DDP does at construction)."""
        if self.size == 1:
            return
        with torch.no_grad():
            for parameter in parameters:
                dist.broadcast(parameter.data, src=0)

    def all_reduce_gradients(self, parameters: Sequence[torch.Tensor], weight: float) -> None:
        """Replace each worker's gradients by their weighted sum over the workers.

        Each worker's loss is normalised over its own mini-batch (``weight``: that mini-batch's
        normaliser, `orsd_gym.algos.Algorithm.minibatch_weight`); scaling its gradient by
        ``weight / sum of weights`` before summing gives exactly the gradient of the loss
        normalised over the union of the workers' mini-batches. A parameter without a gradient
        on every worker keeps none, as in a single process.
        """
        if self.size == 1:
            return
        device = parameters[0].device
        header = torch.tensor([weight, *(p.grad is not None for p in parameters)], dtype=torch.float64, device=device)
        dist.all_reduce(header)
        total, has_grad = float(header[0]), header[1:] > 0
        scale = weight / total if total > 0 else 0.0
        live = [p for p, has in zip(parameters, has_grad.tolist(), strict=True) if has]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        for bucket in _buckets(live):
            flat = torch.cat([p.grad.reshape(-1) for p in bucket]) * scale
            dist.all_reduce(flat)
            offset = 0
            for p in bucket:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                offset += p.numel()

    def _device(self) -> torch.device:
        # NCCL reduces tensors on the worker's GPU; gloo on the CPU.
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")


#: The world of one process.
SINGLE = Workers()


def _buckets(parameters: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    buckets: list[list[torch.Tensor]] = [[]]
    size = 0
    for p in parameters:
        if buckets[-1] and size + p.numel() > BUCKET_ELEMENTS:
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += p.numel()
    return [b for b in buckets if b]


def _picklable(error: Exception) -> Exception:
    """``error`` if it can be sent to the other workers, else a RuntimeError that describes it."""
    try:
        pickle.dumps(error)
        return error
    except Exception:
        return RuntimeError(f"worker 0 failed: {type(error).__name__}: {error}")
