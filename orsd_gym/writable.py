"""Checks that an output location can be written, made before any work that would be lost.

A run, a comparison or a rollout that can only find out at its end that it cannot save what it
made has wasted all of it; these fail at once, with one line naming the setting and the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

from orsd_gym.errors import UsageError


def writable_directory(path: str | Path, what: str) -> Path:
    """``path`` as a directory this process can write in (made if missing); `UsageError`
    naming ``what`` (the setting or option) otherwise."""
    if not str(path).strip():
        raise UsageError(f"{what} is empty: name the directory to write in")
    problem = _unwritable(Path(path))
    if problem:
        raise UsageError(f"{what}={str(path)!r}: {problem}")
    return Path(path)


def writable_file(path: str | Path, what: str) -> Path:
    """``path`` as a file this process can create or replace (its directory made if missing)."""
    file = Path(path)
    if not file.name or file.is_dir():
        raise UsageError(f"{what}={str(path)!r} is a directory: name a file")
    problem = _unwritable(file.parent)
    if problem:
        raise UsageError(f"{what}={str(path)!r}: {problem}")
    if file.exists() and not os.access(file, os.W_OK):
        raise UsageError(f"{what}={str(path)!r}: the file exists and cannot be written")
    return file


def _unwritable(directory: Path) -> str | None:
    """Why ``directory`` cannot be made or written in (None: it can; it is made if missing)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"cannot create the directory ({error.strerror or error})"
    probe = directory / f".orsd-gym-write-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        return f"cannot write in {directory} ({error.strerror or error})"
    return None
