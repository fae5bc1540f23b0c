"""Run every notebook top to bottom and save it with its outputs (``make notebooks``).

Each runs in a temporary working directory (notebook 03 writes a small comparison report), so
only the notebooks themselves change. The test suite executes them the same way.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = sorted(Path(__file__).resolve().parent.glob("*.ipynb"))


def execute(path: Path, workdir: str, timeout: int = 1800) -> nbformat.NotebookNode:
    """``path`` executed in ``workdir``, outputs included."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": workdir}}
    ).execute()
    return notebook


def main() -> int:
    for path in NOTEBOOKS:
        with tempfile.TemporaryDirectory() as workdir:
            notebook = execute(path, workdir)
        nbformat.write(notebook, path)
        print(f"executed {path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
