"""`EpisodeProgress`: how far a `orsd_gym.rollout.collect` call is, on a bar and in progress lines."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orsd_gym import progress


class EpisodeProgress:
    """A rich progress bar over finished episodes (silent when disabled), and a note of them
    for the command's progress lines (`orsd_gym.progress`)."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self._bar = None
        self._won = 0
        self._done = 0
        self._total = total
        self._rounds = 0
        if enabled:
            self._bar = Progress(
                TextColumn("rollout"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[won]}"),
                TimeElapsedColumn(),
            )
            self._bar.start()
            self._task = self._bar.add_task("rollout", total=total, won="")

    def advance(self, won: bool) -> None:
        self._done += 1
        self._won += int(won)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, won=f"success {self._won}/{self._done}")

    def round_done(self) -> None:
        """One more turn played by every active episode (a model turn can take minutes on a CPU)."""
        self._rounds += 1
        progress.note(f"{self._done}/{self._total} episodes played ({self._won} won) after {self._rounds} turn(s)")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
