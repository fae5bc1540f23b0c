"""The GPU check script, run on the CPU so it cannot rot between the runs that have a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "perf" / "gpu_check.py"


def test_gpu_check_passes_on_the_cpu(tmp_path):
    out = tmp_path / "check.json"
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["orsd"]["rubric_frac"] > 0 and results["grpo"]["update_tokens_per_s"] > 0
