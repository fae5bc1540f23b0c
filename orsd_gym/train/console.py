"""What a run shows while it trains: a rich live view, or one plain line per iteration.

The live view has a progress bar over iterations with the phase that is running (warm start,
rollout, advantages, update, eval), elapsed time and an ETA from the iterations done so far,
and a table of the latest metrics. Without it (``--no-live``, or whenever the output is not a
terminal: logs, pipes) each finished iteration prints one line. Either way the run and each of
its steps are phases of the command's progress lines (`orsd_gym.progress`), and inside a
comparison each line carries the whole comparison's ETA.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from orsd_gym import progress

#: Metrics shown in the live table, in this order (others stay in the JSONL file).
SHOWN = (
    "train/success_rate",
    "train/mean_return",
    "train/episode_len",
    "train/invalid_action_rate",
    "algo/zero_adv_group_frac",
    "orsd/rubric_frac",
    "gigpo/anchored_turn_frac",
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
#: What the one-line view prints per iteration.
LINE = (("train/success_rate", "train success"), ("train/mean_return", "return"), ("eval/success_rate", "eval success"))


class _ETA(ProgressColumn):
    """Time left from the mean time of the iterations this process has run (rich's own estimate
    only looks at the last 30 s, shorter than one iteration)."""

    def __init__(self, view: LiveView) -> None:
        super().__init__()
        self.view = view

    def render(self, task: Task) -> Text:
        eta = self.view.eta()
        return Text("ETA " + (time.strftime("%H:%M:%S", time.gmtime(eta)) if eta is not None else "-:--:--"))


class LiveView:
    """Context manager; `phase` when a phase starts, `update(iteration, record)` after each iteration."""

    def __init__(self, title: str, total: int, start: int = 0, *, enabled: bool = True, console: Console | None = None):
        self.title = title
        self.total = total
        self.start = start
        self.done = start
        self.console = console or Console()
        # A live view redraws in place, which only a terminal shows: written to a file (nohup, a
        # cluster job, CI) it would print nothing until the end, so there each iteration prints a line.
        self.enabled = enabled and self.console.is_terminal
        self.started = time.perf_counter()
        self.progress = Progress(
            TextColumn(f"[bold]{title}"),
            TextColumn("[cyan]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            _ETA(self),
            console=self.console,
        )
        self.task = self.progress.add_task("starting", total=total, completed=start)
        self.latest: dict[str, Any] = {}
        self._live: Live | None = None

    def __enter__(self) -> LiveView:
        # Also a phase of the command's progress lines (`orsd_gym.progress`), for log files.
        self._progress_phase = progress.phase(self.title)
        self._progress_phase.__enter__()
        progress.advance(self.start, timed=False)  # a resumed run's iterations: done, but not at this pace
        if self.enabled:
            self._live = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._live is not None:
                self._live.__exit__(*exc)
        finally:
            self._progress_phase.__exit__(*exc)

    def phase(self, text: str) -> None:
        self.progress.update(self.task, description=text)
        progress.step(text)
        self._refresh()

    def update(self, iteration: int, record: dict[str, Any]) -> None:
        self.latest.update({k: v for k, v in record.items() if v is not None})
        progress.advance(iteration - self.done)
        self.done = iteration
        self.progress.update(self.task, completed=iteration)
        if self.enabled:
            self._refresh()
        else:
            self.console.print(self.line(iteration, record), highlight=False, soft_wrap=True)

    def eta(self) -> float | None:
        """Seconds left at the mean pace of this process's iterations (None before the first)."""
        ran = self.done - self.start
        if ran <= 0:
            return None
        return (time.perf_counter() - self.started) / ran * (self.total - self.done)

    def line(self, iteration: int, record: dict[str, Any]) -> str:
        """The one-line report of an iteration."""
        parts = [f"{self.title} | iteration {iteration}/{self.total}"]
        parts += [f"{label} {record[key]:.3f}" for key, label in LINE if isinstance(record.get(key), float | int)]
        # The iteration's own wall time: its sub-phases (``time/orsd_*``...) are already inside it.
        seconds = float(record.get("time/iteration", 0.0))
        eta = self.eta()
        parts.append(f"{seconds:.1f} s" + (f", ETA {time.strftime('%H:%M:%S', time.gmtime(eta))}" if eta else ""))
        whole = progress.eta_text()  # inside a comparison: when all of its runs should be done
        return " | ".join([*parts, whole] if whole else parts)

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
