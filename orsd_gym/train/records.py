"""What a run writes into its directory as it goes: JSON lines and each iteration's audit."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orsd_gym import jsonio
from orsd_gym.algos.base import PreparedBatch
from orsd_gym.rollout.trajectory import save_jsonl


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, on disk before the run goes on (a resumed run reads what it wrote)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(jsonio.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def namespaced(metrics: dict[str, float], namespace: str) -> dict[str, float]:
    """Keys without a namespace get ``namespace/`` (algorithms may also name their own, e.g. ``orsd/``)."""
    return {key if "/" in key else f"{namespace}/{key}": value for key, value in metrics.items()}


def write_audit(directory: Path, batches: list[PreparedBatch]) -> None:
    """An iteration's trajectories, per-token extras and group records, of every worker in rank
    order (so in group order)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_jsonl([t for batch in batches for t in batch.trajectories], directory / "trajectories.jsonl")
    series = [batch.inspection() for batch in batches]
    extras = {key: [t.tolist() for part in series for t in part[key]] for key in series[0]}
    (directory / "token_extras.json").write_text(json.dumps(extras))
    groups = [record for batch in batches for record in batch.audit]
    (directory / "groups.json").write_text(json.dumps(groups, indent=1, default=str))
