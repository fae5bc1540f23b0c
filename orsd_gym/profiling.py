"""Where an iteration's time and memory go: named phases, timed always, profiled on request.

Code marks its phases with `phase` (``with phase("decode"): ...``). A phase always measures its
own wall time (``timer.seconds``), so algorithms can log it; while a `Profiler` is installed
(``with profiling() as profiler:``) every phase is also recorded under its path (``"rollout/
decode"``: phases nest), with its call count, total seconds and peak resident memory, and
`count` adds to named counters (tokens decoded, say). Without a profiler a phase costs two
``perf_counter`` calls. A leaf module: any layer may import it.

Peak resident memory per phase is exact on Linux: entering a phase resets the kernel's
high-water mark (``/proc/self/clear_refs``) after folding the enclosing phase's peak so far
into that phase, and leaving it reads the mark (``VmHWM``). Where that file cannot be written
the peak is the larger of the resident sizes at entry and exit (`Profiler.peak_method` says
which).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_active: Profiler | None = None


@dataclass
class PhaseStats:
    calls: int = 0
    seconds: float = 0.0
    peak_rss_bytes: int = 0
    #: Resident bytes when the phase was last entered (what it found already there).
    entry_rss_bytes: int = 0


@dataclass
class PhaseTimer:
    """What a `phase` measured: its wall time, set when the phase ends."""

    name: str
    seconds: float = 0.0


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field_name):
                return int(line.split()[1])
    raise OSError(f"{field_name} not in /proc/self/status")


def resident_bytes() -> int:
    """This process's resident set size now (0 where /proc is unavailable)."""
    try:
        return _status_kib("VmRSS:") * 1024
    except OSError:
        return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_since_reset() -> int:
    try:
        return _status_kib("VmHWM:") * 1024
    except OSError:
        return resident_bytes()


@dataclass
class Profiler:
    """Phases and counters recorded while installed (see the module docstring)."""

    phases: dict[str, PhaseStats] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    #: "kernel high-water mark" (exact) or "entry/exit samples" (a lower bound).
    peak_method: str = "kernel high-water mark"
    #: Peak resident bytes of the whole profiled block.
    peak_rss_bytes: int = 0
    _stack: list[list] = field(default_factory=list)  # [path, peak so far] per open phase

    def _fold_peak(self) -> int:
        """The peak since the last reset, folded into every open phase; resets the mark."""
        peak = _peak_since_reset() if self.peak_method.startswith("kernel") else resident_bytes()
        for frame in self._stack:
            frame[1] = max(frame[1], peak)
        self.peak_rss_bytes = max(self.peak_rss_bytes, peak)
        if self.peak_method.startswith("kernel") and not _reset_peak():
            self.peak_method = "entry/exit samples"
        return peak

    def enter(self, name: str) -> None:
        self._fold_peak()
        path = f"{self._stack[-1][0]}/{name}" if self._stack else name
        entry = resident_bytes()
        self.phases.setdefault(path, PhaseStats()).entry_rss_bytes = entry  # listed in first-entry order
        self._stack.append([path, entry])

    def exit(self, seconds: float) -> None:
        self._fold_peak()
        path, peak = self._stack.pop()
        stats = self.phases[path]
        stats.calls += 1
        stats.seconds += seconds
        stats.peak_rss_bytes = max(stats.peak_rss_bytes, peak)

    def add(self, name: str, value: float) -> None:
        self.counters[name] = self.counters.get(name, 0.0) + value

    def as_dict(self) -> dict:
        return {
            "peak_method": self.peak_method,
            "peak_rss_gb": self.peak_rss_bytes / 1e9,
            "phases": {
                path: {
                    "calls": s.calls,
                    "seconds": s.seconds,
                    "peak_rss_gb": s.peak_rss_bytes / 1e9,
                    "entry_rss_gb": s.entry_rss_bytes / 1e9,
                }
                for path, s in self.phases.items()
            },
            "counters": dict(self.counters),
        }


@contextmanager
def profiling() -> Iterator[Profiler]:
    """Install a fresh `Profiler` for the block (profiles do not nest)."""
    global _active
    if _active is not None:
        raise RuntimeError("a profiler is already installed; profiles do not nest")
    profiler = Profiler()
    if not _reset_peak():
        profiler.peak_method = "entry/exit samples"
    _active = profiler
    try:
        yield profiler
    finally:
        profiler._fold_peak()
        _active = None


@contextmanager
def phase(name: str) -> Iterator[PhaseTimer]:
    """Time the block as phase ``name`` (recorded in the installed profiler, if any)."""
    timer = PhaseTimer(name)
    profiler = _active
    if profiler is not None:
        profiler.enter(name)
    started = time.perf_counter()
    try:
        yield timer
    finally:
        timer.seconds = time.perf_counter() - started
        if profiler is not None:
            profiler.exit(timer.seconds)


def count(name: str, value: float = 1.0) -> None:
    """Add ``value`` to the installed profiler's counter ``name`` (nothing without a profiler)."""
    if _active is not None:
        _active.add(name, value)
