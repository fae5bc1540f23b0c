"""Per-iteration metrics: a JSONL file (the record), TensorBoard when it is installed.

Each line is flushed and fsynced when written, so a killed run keeps every finished
iteration; on resume the file is cut back to the offset stored in the checkpoint, which drops
lines of the iteration that was in progress.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

from orsd_gym import jsonio
from orsd_gym.writable import append_text, disk_errors, write_file


class MetricsWriter:
    def __init__(
        self, path: str | Path, *, tensorboard_dir: str | Path | None = None, resume_offset: int | None = None
    ):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_offset is None:
            write_file(self.path, "", "the metrics record")
        else:
            with disk_errors(self.path, "the metrics record"), open(self.path, "a+b") as handle:
                handle.truncate(resume_offset)
        self._tensorboard = _open_tensorboard(tensorboard_dir) if tensorboard_dir else None

    @property
    def offset(self) -> int:
        """Byte length of the file: what a checkpoint stores to resume exactly here."""
        return self.path.stat().st_size if self.path.exists() else 0

    def write(self, record: dict[str, Any]) -> None:
        line = jsonio.dumps(record, sort_keys=True)
        append_text(self.path, line + "\n", f"the metrics of iteration {record.get('iteration', '?')}")
        if self._tensorboard is not None:
            step = int(record.get("iteration", 0))
            for key, value in record.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "iteration":
                    self._tensorboard.add_scalar(key, value, step)
            self._tensorboard.flush()

    def close(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()


def combine_worker_metrics(parts: Sequence[tuple[Mapping[str, float], int]], summed: Set[str]) -> dict[str, float]:
    """One record from the algorithm metrics each data-parallel worker computed on its own
    groups (``parts``: the metrics and the group count of every worker). ``summed`` keys are
    totals and are summed; ``time/`` keys are durations and take the slowest worker's (the
    others wait for it); every other key is a mean over groups or episodes, averaged weighted
    by group count. One worker's metrics come back unchanged."""
    if len(parts) == 1:
        return dict(parts[0][0])
    combined: dict[str, float] = {}
    for key in dict.fromkeys(key for metrics, _ in parts for key in metrics):
        values = [(float(metrics[key]), groups) for metrics, groups in parts if key in metrics]
        if key in summed:
            combined[key] = sum(value for value, _ in values)
        elif key.startswith("time/"):
            combined[key] = max(value for value, _ in values)
        else:
            weight = sum(groups for _, groups in values)
            combined[key] = sum(value * groups for value, groups in values) / weight if weight else 0.0
    return combined


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics JSONL file (a torn last line from a crash is ignored)."""
    records = []
    path = Path(path)
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _open_tensorboard(log_dir: str | Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(log_dir=str(log_dir))
