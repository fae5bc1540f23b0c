"""`benchmarks/perf/update_dtype.py` runs at tiny size: both modes update the same weights on the
same rows, so their losses and gradients agree to bfloat16's precision."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

PERF = Path(__file__).resolve().parents[1] / "benchmarks" / "perf"


def test_the_update_dtype_benchmark_runs_at_tiny_size(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(PERF))  # the script imports its sibling _side_by_side
    spec = importlib.util.spec_from_file_location("update_dtype", PERF / "update_dtype.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    try:
        argv = ["--model", "tiny-random", "--rows", "2", "--repeats", "1", "--threads", "1"]
        assert module.main([*argv, "--json", str(tmp_path / "out.json")]) == 0
    finally:
        torch.set_num_threads(threads)
        sys.modules.pop("_side_by_side", None)
    record = json.loads((tmp_path / "out.json").read_text())
    assert set(record["seconds"]) == set(module.MODES) and record["speedup_bfloat16"] > 0
    assert record["gradient_cosine"] > 0.99
    assert abs(record["loss"]["float32"] - record["loss"]["bfloat16"]) < 0.05
