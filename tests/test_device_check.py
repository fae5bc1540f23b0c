"""`make device-wheels`' set and the GPU check's dry run: the set is verified (under 64 MiB,
every requirement carried or in the GPU image, installs offline) and the check's steps, from the
offline install to the table, run on the CPU at a tiny shape."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "benchmarks" / "perf"
#: Where `make device-wheels` builds (CI builds it before the tests).
BUILT = ROOT / "device-wheels"


@pytest.fixture(scope="module")
def device_wheels():
    sys.path.insert(0, str(PERF))
    try:
        yield importlib.import_module("device_wheels")
    finally:
        sys.path.remove(str(PERF))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """The set `make device-wheels` built, else one built here (from the package index)."""
    if (BUILT / "requirements.txt").is_file():
        return BUILT
    out = tmp_path_factory.mktemp("device-wheels")
    done = subprocess.run(
        [sys.executable, str(PERF / "device_wheels.py"), "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def test_the_wheel_set_is_under_the_limit_complete_and_installs_offline(device_wheels, wheels, tmp_path):
    assert device_wheels.verify(wheels) == []
    assert device_wheels.size_mib(wheels) < device_wheels.LIMIT_MIB
    # A wheel for every CPython an image may run, for each compiled dependency.
    names = [w.name for w in wheels.glob("*.whl")]
    for python in device_wheels.PYTHONS:
        tag = "cp" + python.replace(".", "")
        assert all(any(n.lower().startswith(c) and f"-{tag}-" in n for n in names) for c in device_wheels.COMPILED)
    # What verification catches: a missing wheel, and a set over the limit.
    broken = tmp_path / "broken"
    shutil.copytree(wheels, broken)
    next(broken.glob("rich-*.whl")).unlink()
    assert any("does not install offline" in problem for problem in device_wheels.verify(broken))
    with open(broken / "padding.bin", "wb") as padding:
        padding.truncate(device_wheels.LIMIT_MIB * 2**20)
    assert any("over the 64 MiB" in problem for problem in device_wheels.verify(broken))


def test_a_requirement_neither_carried_nor_in_the_image_is_reported(device_wheels, monkeypatch):
    assert device_wheels.missing_requirements() == {}
    monkeypatch.setattr(device_wheels, "CARRIED", tuple(n for n in device_wheels.CARRIED if n != "cloudpickle"))
    assert device_wheels.missing_requirements() == {"gymnasium": {"cloudpickle"}}


@pytest.mark.slow
def test_the_device_check_dry_run_installs_offline_and_writes_the_table(wheels, tmp_path):
    out = tmp_path / "table.json"
    command = [sys.executable, str(PERF / "device_check.py"), "--wheels", str(wheels), "--dry-run", "--json", str(out)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = json.loads(out.read_text())
    assert table["device"] == "cpu (dry run)" and table["model_shape"]["vocab_size"] == 151_936
    assert set(table["rows"]) == {"webshop/grpo", "webshop/orsd"}
    for row in table["rows"].values():
        assert row["iteration_seconds"] > 0 and row["peak_memory_gb"] > 0
        assert 0 < row["decode_share_of_bare_forward"] and row["projected_hours_at_measured_rollout"] > 0
    assert table["orsd_over_grpo"]["webshop"] > 0


def test_the_device_check_refuses_a_missing_wheel_set(tmp_path):
    command = [sys.executable, str(PERF / "device_check.py"), "--wheels", str(tmp_path), "--dry-run"]
    done = subprocess.run([*command, "--json", str(tmp_path / "t.json")], capture_output=True, text=True)
    assert done.returncode != 0 and "make device-wheels" in done.stderr
    assert "Traceback" not in done.stderr
