"""Reading what a command wrote to standard error."""

from __future__ import annotations

import re

#: A progress line (`orsd_gym.progress`): a time stamp, then where the command is.
PROGRESS_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


def message_lines(stderr: str) -> list[str]:
    """The non-empty lines of ``stderr`` other than progress lines: what the command said."""
    return [line for line in stderr.splitlines() if line.strip() and not PROGRESS_LINE.match(line)]
