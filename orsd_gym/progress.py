"""Progress lines from the first minute of every phase, wherever the output goes.

A live view redraws in place, which only a terminal shows; written to a file (nohup, a
scheduler, ``timeout``, CI) a long command would otherwise say nothing until it ends. While a
`reporting` block is open (every ``orsd-gym`` command opens one) each phase prints a line when it
starts (a comparison's run, the warm start, an evaluation, an iteration's rollout, advantages
and update, a rollout's episodes), and while it runs, a line whenever the output has been
silent for ``every`` seconds (`DEFAULT_EVERY`; the ``ORSD_GYM_PROGRESS_EVERY`` environment
variable sets it): how long the phase has run, how far it is (`note`: episodes played...) and,
inside a comparison, when the whole comparison should end (`budget`, `advance`).

Code marks its phases with ``with phase("warm start"):``, moves an open phase to its next step
with `step`; all of it costs nothing without a reporter. A leaf module: any layer may import it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: Seconds of silence after which a running phase prints a line.
DEFAULT_EVERY = 60.0
EVERY_VARIABLE = "ORSD_GYM_PROGRESS_EVERY"


@dataclass
class _Open:
    """A phase that has started and not ended, and its current step."""

    name: str
    started: float
    step: str | None = None
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}: {self.step}" if self.step else self.name


@dataclass
class Budget:
    """The work units (iterations) of a whole comparison, for its ETA: units done by earlier
    processes (a resumed or finished run) count as done without setting the pace."""

    total: int
    started: float
    done: int = 0
    timed: int = 0

    def eta(self, now: float) -> float | None:
        if self.timed <= 0:
            return None
        return (now - self.started) / self.timed * max(0, self.total - self.done)


@dataclass
class Reporter:
    """Where progress lines go and what is open; `beat` prints a line after ``every`` s of silence."""

    write: Callable[[str], None]
    every: float = DEFAULT_EVERY
    clock: Callable[[], float] = time.monotonic
    open: list[_Open] = field(default_factory=list)
    budget: Budget | None = None
    #: Where the first phase that an exception (Ctrl-C, SIGTERM, an error) left was.
    stopped_at: str | None = None
    last_line: float = 0.0

    def __post_init__(self) -> None:
        self.last_line = self.clock()
        self._lock = threading.RLock()

    def say(self, text: str) -> None:
        with self._lock:
            self.last_line = self.clock()
            self.write(f"[{time.strftime('%H:%M:%S')}] {text}")

    def where(self) -> str:
        return " > ".join(item.label for item in self.open)

    def eta_text(self) -> str:
        eta = self.budget.eta(self.clock()) if self.budget else None
        return f"comparison ETA {_duration(eta)}" if eta is not None else ""

    def beat(self) -> None:
        """A line saying where things stand, if the open phases have been silent for ``every`` s."""
        with self._lock:
            now = self.clock()
            if not self.open or now - self.last_line < self.every:
                return
            inner = self.open[-1]
            parts = [f"{self.where()}: running for {_duration(now - inner.started)}"]
            parts += [text for text in (inner.note, self.eta_text()) if text]
            self.say(", ".join(parts))


_active: Reporter | None = None


@contextmanager
def reporting(
    write: Callable[[str], None] | None = None, every: float | None = None, clock: Callable[[], float] | None = None
) -> Iterator[Reporter]:
    """Install a reporter (lines to standard error by default) and its heartbeat thread for the block."""
    global _active
    write = write or _to_stderr
    reporter = Reporter(write, _every_from_environment(write) if every is None else every, clock or time.monotonic)
    previous, _active = _active, reporter
    stop = threading.Event()
    heartbeat = threading.Thread(target=_beat_until, args=(reporter, stop), name="orsd-gym progress", daemon=True)
    heartbeat.start()
    try:
        yield reporter
    finally:
        stop.set()
        heartbeat.join()
        _active = previous


def _every_from_environment(write: Callable[[str], None]) -> float:
    text = os.environ.get(EVERY_VARIABLE, "")
    try:
        every = float(text) if text else DEFAULT_EVERY
    except ValueError:
        every = -1.0
    if every > 0:
        return every
    write(f"{EVERY_VARIABLE}={text!r} is not a number of seconds above 0: using {DEFAULT_EVERY:g}")
    return DEFAULT_EVERY


def _beat_until(reporter: Reporter, stop: threading.Event) -> None:
    while not stop.wait(min(1.0, reporter.every / 4)):
        reporter.beat()


def _to_stderr(line: str) -> None:
    # sys.stderr as it is now: a live view replaces it while it draws, to print above itself.
    print(line, file=sys.stderr, flush=True)


@contextmanager
def phase(name: str, *, announce: bool = True) -> Iterator[None]:
    """A phase: a line when it starts (unless ``announce`` is false: a whole command, whose
    mistakes stay one line), then one whenever the output has been silent too long."""
    reporter = _active
    if reporter is None:
        yield
        return
    with reporter._lock:
        reporter.open.append(_Open(name, reporter.clock()))
        reporter.stopped_at = None
        if announce:
            reporter.say(f"{reporter.where()}: started")
    try:
        yield
    except BaseException:
        if reporter.stopped_at is None:  # the innermost phase is left first
            reporter.stopped_at = reporter.where()
        raise
    finally:
        with reporter._lock:
            reporter.open.pop()


def step(text: str) -> None:
    """The innermost open phase moves on to its step ``text`` (a line says so)."""
    reporter = _active
    if reporter is None or not reporter.open:
        return
    with reporter._lock:
        inner = reporter.open[-1]
        inner.step, inner.note, inner.started = text, "", reporter.clock()
        reporter.say(f"{reporter.where()}: started")


def announce(text: str) -> None:
    """A line now, through the active reporter (timestamped as progress lines are), else to standard error."""
    if _active is not None:
        _active.say(text)
    else:
        _to_stderr(text)


def note(text: str) -> None:
    """How far the innermost open phase is (printed with its next line)."""
    reporter = _active
    if reporter is not None and reporter.open:
        reporter.open[-1].note = text


@contextmanager
def budget(total: int) -> Iterator[None]:
    """The whole comparison's ``total`` work units (iterations), for the ETA every line shows."""
    reporter = _active
    if reporter is None:
        yield
        return
    reporter.budget = Budget(total, reporter.clock())
    try:
        yield
    finally:
        reporter.budget = None


def advance(units: int = 1, *, timed: bool = True) -> None:
    """``units`` of the comparison's work are done (``timed=False``: done before this process ran)."""
    reporter = _active
    if reporter is not None and reporter.budget is not None:
        reporter.budget.done += units
        reporter.budget.timed += units if timed else 0


def eta_text() -> str:
    """ "comparison ETA h:mm:ss" inside a comparison with an estimate, else ""."""
    return _active.eta_text() if _active is not None else ""


def stopped_at() -> str | None:
    """Where the last exception left the phases (for "interrupted during ...")."""
    return _active.stopped_at if _active is not None else None


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
