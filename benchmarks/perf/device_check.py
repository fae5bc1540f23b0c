"""The GPU check in one call: install the carried wheels offline, measure Qwen3-1.7B's shape for
GRPO and ORSD with `paper_scale.py`, and write the GPU table as JSON.

A GPU machine here is brief and offline, with torch, transformers, accelerate and peft only.
`make device-wheels` builds what else it needs (`device_wheels.py`); this script installs that
set into a scratch directory with ``pip install --no-index``, runs `paper_scale.py` on WebShop
(the synthetic catalog: no compiled engine; ALFWorld's is not carried) at the model shape of
Qwen3-1.7B and a rollout cut to `ROLLOUT` so both algorithms fit `TIME_LIMIT_S`, and writes the
table: per algorithm the iteration's seconds and phases, the peak GPU memory, the decode rate
against a bare batched forward of the same model (the decode-vs-limit check), ORSD over GRPO,
and the run projected at the measured rollout shape (random weights write every turn to
``max_new_tokens``: an upper bound per turn). ``--dry-run`` runs the same steps on the CPU at a
tiny shape, so CI keeps the path working.

    make device-wheels
    python benchmarks/perf/device_check.py --wheels device-wheels --json gpu_table.json   # on the GPU
    python benchmarks/perf/device_check.py --wheels device-wheels --dry-run --json /tmp/t.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from device_wheels import TOKENIZER, install

PERF = Path(__file__).resolve().parent
#: What one GPU call may take, with room left for the machine's start and the transfers.
TIME_LIMIT_S = 480
#: The measured rollout on the GPU (the preset's is 16 tasks x 8 attempts x 15 turns x 512 tokens).
ROLLOUT = ["--tasks", "2", "--group", "4", "--max-turns", "2", "--max-new-tokens", "128"]
#: One env process per measured episode (the preset starts 32).
GPU = ["--device", "cuda", "algo.per_algo.orsd.proposal_max_new_tokens=128", "env.num_envs=8", *ROLLOUT]
#: The same steps on the CPU: a 2-layer, 128-wide model of the same vocabulary, a tiny rollout.
DRY_RUN = ["--device", "cpu", "--layers", "2", "--hidden", "128", "--tasks", "1", "--group", "2"]
DRY_RUN += ["--max-turns", "2", "--max-new-tokens", "8", "algo.per_algo.orsd.proposal_max_new_tokens=8"]
DRY_RUN += ["train.threads=1"]


def table(record: dict, device: str) -> dict:
    """The GPU table from `paper_scale.py`'s record."""
    rows = {}
    for name, result in record["results"].items():
        decode = result["decode"] or {}
        side = decode.get("side_by_side") or {}
        rows[name] = {
            "iteration_seconds": result["iteration_seconds"],
            "phases_seconds": result["phases"],
            "checkpoint_seconds": result["checkpoint"]["seconds"],
            "peak_memory_gb": result["peak_memory_gb"],
            "peak_memory_kind": result["peak_memory_kind"],
            "decode_sampled_tokens_per_s": decode.get("engine_sampled_tokens_per_s"),
            "decode_row_steps_per_s": side.get("engine_row_steps_per_s"),
            "bare_forward_tokens_per_s": side.get("bare_tokens_per_s"),
            "decode_share_of_bare_forward": (
                side["engine_row_steps_per_s"] / side["bare_tokens_per_s"] if side.get("bare_tokens_per_s") else None
            ),
            "projected_hours_at_measured_rollout": result["projection"]["total_hours"],
            "projection": result["projection"],
            "measured_rollout": result["shape"],
        }
    return {
        "device": device,
        "model_shape": record["shape"],
        "overrides": record["overrides"],
        "rows": rows,
        "orsd_over_grpo": record["orsd_over_grpo"],
    }


def device_name(dry_run: bool) -> str:
    if dry_run:
        return "cpu (dry run)"
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("device_check: CUDA is not available to torch; on a machine without a GPU use --dry-run")
    return torch.cuda.get_device_name(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", default="device-wheels", help="the set `make device-wheels` built")
    parser.add_argument("--json", required=True, help="write the GPU table here")
    parser.add_argument("--dry-run", action="store_true", help="the same steps on the CPU at a tiny shape")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, help="seconds for the whole check")
    args = parser.parse_args()
    started = time.monotonic()
    wheels = Path(args.wheels)
    if not (wheels / "requirements.txt").is_file():
        raise SystemExit(f"device_check: {wheels} holds no wheel set; build one with `make device-wheels`")
    device = device_name(args.dry_run)
    with tempfile.TemporaryDirectory(prefix="device-check-") as scratch:
        target = Path(scratch) / "site"
        done = install(wheels, target)
        if done.returncode != 0:
            raise SystemExit(f"device_check: the wheels did not install offline: {done.stderr.strip()[-500:]}")
        print(f"installed {wheels} offline in {time.monotonic() - started:.0f} s", flush=True)
        raw = Path(scratch) / "paper_scale.json"
        command = [sys.executable, str(PERF / "paper_scale.py"), "--presets", "webshop", "--algos", "grpo,orsd"]
        command += ["--tokenizer", str(wheels / TOKENIZER), "--json", str(raw), *(DRY_RUN if args.dry_run else GPU)]
        # The installed set comes first: the check runs this project's wheel, not a checkout.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
        remaining = args.time_limit - (time.monotonic() - started)
        try:
            run = subprocess.run(command, env=env, timeout=max(1.0, remaining))
        except subprocess.TimeoutExpired:
            raise SystemExit(f"device_check: paper_scale.py ran past the {args.time_limit:.0f} s limit") from None
        if run.returncode != 0:
            raise SystemExit(f"device_check: paper_scale.py failed (exit {run.returncode})")
        result = table(json.loads(raw.read_text()), device)
    result["seconds"] = time.monotonic() - started
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"device_check: the table is in {args.json} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
