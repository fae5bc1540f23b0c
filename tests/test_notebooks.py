"""Every notebook in notebooks/ runs top to bottom (with tiny models and small envs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))
from execute import NOTEBOOKS, execute  # noqa: E402  (notebooks/execute.py: what `make notebooks` runs)


def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_environments.ipynb", "02_rollouts_and_masks.ipynb", "03_orsd_credit.ipynb"} <= names


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = execute(path, str(tmp_path), timeout=600)
    errors = [
        o
        for cell in notebook.cells
        if cell.cell_type == "code"
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_are_committed_with_their_outputs(path):
    """What a notebook shows is visible on the repository page (``make notebooks`` saves it)."""
    import nbformat

    code = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    printing = [cell for cell in code if "print(" in cell.source]
    assert printing and all(cell.get("outputs") for cell in printing)
