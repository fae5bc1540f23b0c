"""One writer per directory: a lock file naming its owner (pid, host, start time).

A run directory, or a comparison's seed in its report directory, is written by one process at
a time: a second ``orsd-gym train`` into a live run's directory, or a second ``compare
--seed-list`` process with the same seed and ``--out``, would interleave its records with the
first one's. `acquire` takes the lock or refuses in one line naming the owner; the process that
holds it may take it again (a comparison's process trains each of its runs), and `release` gives
it back when its last holder is done.

Mutual exclusion is the kernel's (``flock`` on the lock file), so a lock dies with its process
however it ends (a crash, ``kill -9``, a lost machine): a lock file left behind by a process that
no longer runs is stale, and the next owner takes it over with a line saying whose it was. Its
content only names the owner for that message and for people.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orsd_gym.errors import RunDirectoryError

#: The lock file a run directory's owner holds.
RUN_LOCK = "run.lock"


@dataclass
class _Held:
    fd: int
    holders: int


#: The locks this process holds: resolved lock path -> its file and how many hold it here.
_held: dict[Path, _Held] = {}


def acquire(lock_path: str | Path, what: str, say: Callable[[str], None] = print) -> Path:
    """Take the lock file ``lock_path`` for this process (``what`` names what it guards in the
    refusal: "run directory reports/x"); raises `RunDirectoryError` naming the live owner.
    Returns the resolved path to `release`."""
    path = Path(lock_path).resolve()
    if path in _held:
        _held[path].holders += 1
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirectoryError(
                f"{what} is in use by {_describe(_read_owner(path))} ({path}); wait for it to finish or stop it first"
            ) from None
        # The holder we waited for may have removed the file as it released it: lock the file now there.
        if _same_file(fd, path):
            break
        os.close(fd)
    previous = _read_owner(path)
    if previous:
        say(f"taking over {path}: its owner, {_describe(previous)}, is no longer running")
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(owner) + "\n").encode(), 0)
    _held[path] = _Held(fd, 1)
    return path


def release(path: Path) -> None:
    """Give back a lock `acquire` returned; the last holder in this process removes the file."""
    held = _held.get(path)
    if held is None:
        return
    held.holders -= 1
    if held.holders > 0:
        return
    del _held[path]
    try:
        path.unlink(missing_ok=True)
    finally:
        os.close(held.fd)  # closing the file ends the flock


def held_here(path: str | Path) -> bool:
    """Whether this process holds the lock file ``path``."""
    return Path(path).resolve() in _held


@atexit.register
def _release_all() -> None:
    """An ending process removes its lock files (the kernel would end the locks themselves)."""
    for path in list(_held):
        _held[path].holders = 1
        release(path)


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _read_owner(path: Path) -> dict | None:
    try:
        owner = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _describe(owner: dict | None) -> str:
    if not owner:
        return "another process (starting: it has not written its name yet)"
    return f"pid {owner.get('pid')} on {owner.get('host')} (since {owner.get('started')})"
