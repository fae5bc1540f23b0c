"""The behaviour cloning's progress on disk, so an interrupted warm start continues where it stood.

A warm start of a real model clones for an hour or more on a CPU; a process that ends half way
(Ctrl-C, a session that closes, a machine that restarts) would otherwise clone again from the
start. `CloneProgress` is everything the cloning loop carries between optimiser steps: where it
is (epoch, next batch), the loss so far, the random states (the epoch's shuffling generator as it
stood before the epoch's permutation, torch's for dropout), and beside it the trainable weights
and the AdamW moments. Restored, the loop continues exactly as the uninterrupted one would have:
the same steps on the same batches, bit for bit.

The file sits beside the warm-start file (``<name>.progress.safetensors``), written whole or not
at all (`orsd_gym.writable.write_with`), and carries a fingerprint of what is cloned (the
demonstrations' tokens and cloned positions, the learning rate, batch size, gradient clip and
seed): progress made for other demonstrations or settings is never continued, and is replaced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from orsd_gym.policies.base import Policy
from orsd_gym.rollout.trajectory import Trajectory
from orsd_gym.train.checkpoint import join_optimizer_state, split_optimizer_state
from orsd_gym.writable import write_with

#: Where the file keeps `CloneProgress` and the fingerprint (safetensors metadata, JSON strings).
STATE_KEY = "orsd_gym.clone_progress"
FINGERPRINT_KEY = "orsd_gym.clone_fingerprint"
#: Saved at the end of every epoch and, within one, after a step once this long has passed since
#: the last save: at most this much cloning is repeated after an interruption.
SAVE_EVERY_SECONDS = 300.0


@dataclass
class CloneProgress:
    """Where the cloning stands between two optimiser steps."""

    #: The epoch in progress (0-based) and the first of its batches not stepped yet.
    epoch: int = 0
    next_batch: int = 0
    #: The shuffling generator's state before this epoch's permutation (None: not drawn yet).
    epoch_rng: dict[str, Any] | None = None
    #: Finished epochs' mean NLL per cloned token, and the running sums of the epoch in progress.
    losses: list[float] = field(default_factory=list)
    epoch_loss: float = 0.0
    epoch_tokens: int = 0


def progress_path(warm_start_path: Path) -> Path:
    return warm_start_path.with_name(warm_start_path.stem + ".progress.safetensors")


def fingerprint(demos: Sequence[Trajectory], settings: dict[str, Any]) -> str:
    """What the progress is progress of: the cloned demonstrations and the cloning's settings."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for demo in demos:
        digest.update(np.asarray(demo.token_ids, dtype=np.int64).tobytes())
        digest.update(np.asarray(demo.loss_mask, dtype=np.int8).tobytes())
    return digest.hexdigest()


def save_progress(
    path: Path, progress: CloneProgress, policy: Policy, optimizer: torch.optim.Optimizer, mark: str
) -> None:
    optimizer_tensors, optimizer_rest = split_optimizer_state(optimizer.state_dict())
    tensors = {f"policy/{k}": v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}
    tensors |= {f"optimizer/{k}": v.detach().contiguous().cpu() for k, v in optimizer_tensors.items()}
    state = {**asdict(progress), "optimizer": optimizer_rest, "torch_rng": torch.get_rng_state().tolist()}
    metadata = {STATE_KEY: json.dumps(state), FINGERPRINT_KEY: mark}
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    write_with(
        path,
        "the warm start's cloning progress",
        lambda partial: save_file(tensors, partial, metadata=metadata),
        size=size,
    )


def load_progress(
    path: Path, policy: Policy, optimizer: torch.optim.Optimizer, mark: str
) -> tuple[CloneProgress | None, str | None]:
    """Restore the progress saved at ``path`` into ``policy`` and ``optimizer``; returns it, or
    None with the reason it was not used (None, None: there is none)."""
    if not path.is_file():
        return None, None
    try:
        with safe_open(path, framework="pt") as handle:
            metadata = handle.metadata() or {}
            if metadata.get(FINGERPRINT_KEY) != mark:
                return None, "it was made for other demonstrations or cloning settings"
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
        state = json.loads(metadata[STATE_KEY])
    except (OSError, ValueError, KeyError, SafetensorError) as error:  # a torn or foreign file
        return None, f"it cannot be read ({error})"
    policy.load_state_dict({k.removeprefix("policy/"): v for k, v in tensors.items() if k.startswith("policy/")})
    optimizer_tensors = {k.removeprefix("optimizer/"): v for k, v in tensors.items() if k.startswith("optimizer/")}
    optimizer.load_state_dict(join_optimizer_state(optimizer_tensors, state.pop("optimizer")))
    torch.set_rng_state(torch.tensor(state.pop("torch_rng"), dtype=torch.uint8))
    return CloneProgress(**state), None
