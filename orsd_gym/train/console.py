"""The trainer's rich live view: a progress bar over iterations and the latest metrics."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

#: Metrics shown in the live table, in this order (others stay in the JSONL file).
SHOWN = (
    "train/success_rate",
    "train/mean_return",
    "train/episode_len",
    "train/invalid_action_rate",
    "algo/zero_adv_group_frac",
    "orsd/rubric_frac",
    "loss/pg",
    "policy/clip_frac",
    "policy/approx_kl_old",
    "policy/kl_ref",
    "policy/entropy",
    "eval/success_rate",
    "time/rollout",
    "time/prepare",
    "time/update",
)


class LiveView:
    """Context manager; ``update(iteration, record)`` after each iteration."""

    def __init__(self, title: str, total: int, start: int = 0, *, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self.console = console or Console()
        self.progress = Progress(
            TextColumn(f"[bold]{title}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.task = self.progress.add_task("iterations", total=total, completed=start)
        self.latest: dict[str, Any] = {}
        self._live: Live | None = None

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def phase(self, text: str) -> None:
        self.progress.update(self.task, description=text)
        self._refresh()

    def update(self, iteration: int, record: dict[str, Any]) -> None:
        self.latest.update({k: v for k, v in record.items() if v is not None})
        self.progress.update(self.task, completed=iteration)
        self._refresh()

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def _render(self) -> Group:
        table = Table(show_header=True, header_style="bold", box=None)
        table.add_column("metric")
        table.add_column("latest", justify="right")
        for key in SHOWN:
            if key in self.latest:
                value = self.latest[key]
                table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
        return Group(self.progress, table)
