"""Crash-safe checkpoints.

A checkpoint is a directory ``checkpoints/iter_000012/`` holding

* ``policy.safetensors`` (trainable weights), ``optimizer.safetensors`` (optimiser tensors)
  and ``state.json`` (iteration, config, optimiser/scheduler scalars, RNG states, the metrics
  file offset, the algorithm's state);
* ``manifest.json``, written last, with the SHA-256 of every other file.

It is assembled in a temporary sibling directory and renamed into place, so a process killed
at any moment leaves either the previous complete checkpoint or the new one, never a half. On
load, a checkpoint whose manifest is missing or whose hashes do not match is reported and
skipped in favour of the newest good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from orsd_gym.errors import CheckpointError, DiskWriteError
from orsd_gym.writable import disk_errors

_PREFIX = "iter_"
_MANIFEST = "manifest.json"


class CorruptCheckpointWarning(UserWarning):
    """A checkpoint was found damaged and skipped."""


@dataclass
class Checkpoint:
    path: Path
    iteration: int
    policy_state: dict[str, torch.Tensor]
    optimizer_tensors: dict[str, torch.Tensor]
    state: dict[str, Any]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    root: str | Path,
    iteration: int,
    *,
    policy_state: dict[str, torch.Tensor],
    optimizer_tensors: dict[str, torch.Tensor],
    state: dict[str, Any],
    keep: int = 3,
) -> Path:
    """Write checkpoint ``iteration`` under ``root`` atomically; keep the newest ``keep``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{iteration:06d}"
    staging = root / f".{final.name}.tmp-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    size = sum(t.numel() * t.element_size() for t in (*policy_state.values(), *optimizer_tensors.values()))
    try:
        # Interrupted or failed (a full disk): the half-written copy, which would hold the space
        # a resume needs, is removed; the previous checkpoint is untouched.
        with disk_errors(final, f"checkpoint {final.name}", size=size, partial=staging):
            _write(staging, iteration, policy_state, optimizer_tensors, state)
    except DiskWriteError as error:
        error.intact = intact_note(root)
        raise
    if final.exists():  # re-saving the same iteration (e.g. at exit): replace it
        shutil.rmtree(final)
    os.rename(staging, final)
    _fsync_dir(root)
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def intact_note(root: str | Path) -> str:
    """What a failed write leaves intact of the run whose checkpoints are under ``root``."""
    for path in reversed(list_checkpoints(root)):
        if verify_checkpoint(path) is None:
            return f"the last good checkpoint ({path.name}, iteration {int(path.name[len(_PREFIX) :])}) is intact"
    return "no checkpoint was written yet"


def remove_stale_temporaries(root: str | Path) -> list[Path]:
    """Remove half-written checkpoints a killed process left under ``root`` (a run directory
    has one writer: the run that claimed it); returns what was removed."""
    root = Path(root)
    stale = [p for p in root.glob(f".{_PREFIX}*.tmp-*") if p.is_dir()] if root.is_dir() else []
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def _write(
    staging: Path,
    iteration: int,
    policy_state: dict[str, torch.Tensor],
    optimizer_tensors: dict[str, torch.Tensor],
    state: dict[str, Any],
) -> None:
    """The checkpoint's files in ``staging``, the manifest last, all on disk when it returns."""
    save_file({k: v.detach().contiguous().cpu() for k, v in policy_state.items()}, staging / "policy.safetensors")
    save_file(
        {k: v.detach().contiguous().cpu() for k, v in optimizer_tensors.items()}, staging / "optimizer.safetensors"
    )
    (staging / "state.json").write_text(json.dumps(state, indent=1, default=_json_default), encoding="utf-8")
    files = {name: _sha256(staging / name) for name in ("policy.safetensors", "optimizer.safetensors", "state.json")}
    manifest = {"iteration": iteration, "files": files}
    with open(staging / _MANIFEST, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
        handle.flush()
        os.fsync(handle.fileno())
    _fsync_dir(staging)


def list_checkpoints(root: str | Path) -> list[Path]:
    """Checkpoint directories under ``root``, oldest first (temporaries excluded)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [
        p for p in root.iterdir() if p.is_dir() and p.name.startswith(_PREFIX) and p.name[len(_PREFIX) :].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name[len(_PREFIX) :]))


def verify_checkpoint(path: str | Path) -> str | None:
    """Why ``path`` is not a complete checkpoint, or None if it is."""
    path = Path(path)
    manifest_path = path / _MANIFEST
    if not manifest_path.is_file():
        return "manifest.json is missing (the checkpoint was not finished)"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return "manifest.json is unreadable"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if _sha256(file) != expected:
            return f"{name} does not match its checksum"
    return None


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Load one checkpoint directory; raises `CheckpointError` if it is damaged."""
    path = Path(path)
    problem = verify_checkpoint(path)
    if problem is not None:
        raise CheckpointError(f"checkpoint {path} is unusable: {problem}")
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    return Checkpoint(
        path=path,
        iteration=int(state["iteration"]),
        policy_state=load_file(path / "policy.safetensors"),
        optimizer_tensors=load_file(path / "optimizer.safetensors"),
        state=state,
    )


def latest_good_checkpoint(root: str | Path) -> Checkpoint | None:
    """The newest checkpoint under ``root`` that verifies; damaged ones are reported and skipped."""
    for path in reversed(list_checkpoints(root)):
        problem = verify_checkpoint(path)
        if problem is None:
            return load_checkpoint(path)
        warnings.warn(f"skipping damaged checkpoint {path}: {problem}", CorruptCheckpointWarning, stacklevel=2)
    return None


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, torch.Tensor):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value).__name__} into a checkpoint")


# --- optimiser state <-> (tensors, JSON scalars) ----------------------------------------------
def split_optimizer_state(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split a torch optimiser ``state_dict`` into named tensors and a JSON-safe remainder."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param_id, param_state in state_dict["state"].items():
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{param_id}.{key}"] = value
            else:
                scalars.setdefault(str(param_id), {})[key] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def join_optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `split_optimizer_state`."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        param_id, key = name.split(".", 1)
        state.setdefault(int(param_id), {})[key] = value
    for param_id, values in rest["scalars"].items():
        state.setdefault(int(param_id), {}).update(values)
    return {"state": state, "param_groups": rest["param_groups"]}
