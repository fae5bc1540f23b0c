"""Where the toolkit writes: checked before any work, and every write made through here.

A run, a comparison or a rollout that can only find out at its end that it cannot save what it
made has wasted all of it; `writable_directory` and `writable_file` fail at once, with one line
naming the setting and the reason.

A disk can still fill up (or a file-size limit be reached) while the work runs. Every file the
toolkit writes goes through `write_file`, `write_with` or `append_text`: a full disk, a
file-size limit, a read-only or forbidden directory (``ENOSPC``, ``EDQUOT``, ``EFBIG``,
``EROFS``, ``EACCES``, ``EPERM``, also as safetensors' "os error N") becomes one
`DiskWriteError` naming the file, what was being written and why; the partial file is removed
(a replaced file is written beside it and renamed into place, so the old one stays whole; an
append is cut back to where it started).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orsd_gym.errors import DiskWriteError, UsageError

#: The errors of a write that lacks room or permission (anything else is a bug and raised as is).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM})


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


def write_file(path: str | Path, data: str | bytes, what: str) -> Path:
    """Write ``data`` (text as UTF-8) to ``path``, replacing it whole or not at all."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return write_with(path, what, lambda partial: partial.write_bytes(payload), size=len(payload))


def write_with(path: str | Path, what: str, write: Callable[[Path], object], *, size: int | None = None) -> Path:
    """Let ``write`` write the file at the path it is given (beside ``path``, with its suffix, so
    a writer that picks a format by suffix still does), then rename it into place: ``path`` is
    replaced whole or left as it was. ``size`` (bytes, when known) is said when the disk is full."""
    path = Path(path)
    partial = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    with disk_errors(path, what, size=size, partial=partial):
        path.parent.mkdir(parents=True, exist_ok=True)
        write(partial)
        os.replace(partial, path)
    return path


def append_text(path: str | Path, text: str, what: str, *, sync: bool = True) -> None:
    """Append ``text`` to ``path`` (on disk before returning when ``sync``); a failed append
    is cut back to where it started, so the file never ends in half a record."""
    path = Path(path)
    start = path.stat().st_size if path.exists() else None
    payload = text.encode("utf-8")
    try:
        with disk_errors(path, what, size=len(payload)):
            with open(path, "ab") as handle:
                handle.write(payload)
                handle.flush()
                if sync:
                    os.fsync(handle.fileno())
    except DiskWriteError:
        _cut_back(path, start)
        raise


@contextmanager
def disk_errors(path: str | Path, what: str, *, size: int | None = None, partial: Path | None = None) -> Iterator[None]:
    """Turn a write's lack of room or permission inside the block into a `DiskWriteError`
    about ``path``; ``partial`` (a file or directory the block was writing) is removed on any
    failure, an interruption included."""
    try:
        yield
    except BaseException as error:
        if partial is not None:
            _remove(partial)
        code = disk_errno(error)
        if code is None:
            raise
        raise DiskWriteError(str(path), what, *_reason_and_remedy(code, Path(path), size)) from error


def disk_errno(error: BaseException) -> int | None:
    """The errno of ``error`` when it is a write's lack of room or permission (an `OSError`, or
    safetensors' error that carries "os error N" in its message), else None."""
    if isinstance(error, DiskWriteError):
        return None
    code = error.errno if isinstance(error, OSError) else None
    if code is None and type(error).__name__ == "SafetensorError":
        found = re.search(r"os error (\d+)", str(error))
        code = int(found.group(1)) if found else None
    return code if code in DISK_ERRNOS else None


def _reason_and_remedy(code: int, path: Path, size: int | None) -> tuple[str, str]:
    if code in (errno.ENOSPC, errno.EDQUOT):
        needed = f"{size} bytes to write, " if size is not None else ""
        return f"the disk under {path.parent} is full ({needed}{_free_bytes(path.parent)} bytes free)", "free space"
    if code == errno.EFBIG:
        return "the file would exceed this process's file-size limit", "raise the limit (ulimit -f)"
    if code == errno.EROFS:
        return f"{path.parent} is on a read-only file system", "make it writable"
    return f"permission denied in {path.parent}", "make it writable"


def _free_bytes(directory: Path) -> int:
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    return shutil.disk_usage(directory).free


def _remove(partial: Path) -> None:
    if partial.is_dir():
        shutil.rmtree(partial, ignore_errors=True)
    else:
        partial.unlink(missing_ok=True)


def _cut_back(path: Path, start: int | None) -> None:
    """Undo a failed append: back to ``start`` bytes, or no file when there was none."""
    try:
        if start is None:
            path.unlink(missing_ok=True)
        else:
            os.truncate(path, start)
    except OSError:
        pass  # the directory itself refused the write: nothing of it was written
