"""`benchmarks/perf/generation_padding.py` runs end to end at tiny size: both generation paths
play the same episodes, and every figure its README section quotes is in its record."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "perf" / "generation_padding.py"


def test_the_generation_padding_benchmark_runs_at_tiny_size(tmp_path):
    spec = importlib.util.spec_from_file_location("generation_padding", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    try:
        assert module.main(["--dry-run", "--threads", "1", "--json", str(tmp_path / "out.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    record = json.loads((tmp_path / "out.json").read_text())
    for part in ("rollout", "eval"):
        assert record[part]["samples"]["identical_tokens"]
        for mode in module.MODES:
            assert record[part][mode]["counters"]["sampled_tokens"] > 0
    assert set(record["iteration_seconds"]) == set(module.MODES)
    assert record["update_matmuls"]["cpu_gflops"] > 0 and record["update_matmuls"]["gflop"] > 0
    assert record["decode_limit"]["bare_tokens_per_s"] > 0
