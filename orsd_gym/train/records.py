"""What a run writes into its directory as it goes: JSON lines and each iteration's audit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orsd_gym import jsonio
from orsd_gym.algos.base import PreparedBatch
from orsd_gym.rollout.trajectory import save_jsonl
from orsd_gym.writable import append_text, write_file


def append_line(path: Path, record: dict[str, Any]) -> None:
    """One JSON line, on disk before the run goes on (a resumed run reads what it wrote)."""
    append_text(path, jsonio.dumps(record) + "\n", f"a record ({path.name})")


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
    write_file(directory / "token_extras.json", json.dumps(extras), "the audit's per-token extras")
    groups = [record for batch in batches for record in batch.audit]
    write_file(directory / "groups.json", json.dumps(groups, indent=1, default=str), "the audit's group records")
