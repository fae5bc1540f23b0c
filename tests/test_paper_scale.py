"""The paper-scale benchmark: its model has Qwen3-1.7B's shape, its projection is arithmetic
one can check, and the script runs end to end at a reduced shape on the CPU."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orsd_gym.train.config import load_config

PERF = Path(__file__).resolve().parents[1] / "benchmarks" / "perf"


@pytest.fixture(scope="module")
def paper_scale():
    sys.path.insert(0, str(PERF))
    try:
        yield importlib.import_module("paper_scale")
    finally:
        sys.path.remove(str(PERF))


def test_the_full_shape_is_qwen3_1_7b(paper_scale):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = paper_scale.model_shape(None, None)
    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**shape))
    parameters = sum(p.numel() for p in model.parameters())
    assert 1.70e9 < parameters < 1.74e9  # Qwen3-1.7B: 1.72B with tied embeddings
    reduced = paper_scale.model_shape(2, 256)
    assert reduced["num_hidden_layers"] == 2 and reduced["hidden_size"] == 256
    assert reduced["vocab_size"] == shape["vocab_size"] and reduced["head_dim"] == shape["head_dim"]
    assert reduced["num_attention_heads"] * reduced["head_dim"] == 256


def test_the_projection_adds_every_iteration_checkpoint_and_evaluation(paper_scale):
    config = load_config("alfworld_qwen3_1.7b")  # 150 iterations, evaluated every 10 on 140 tasks x 1
    # 8 measured episodes took 4 s to roll out: 0.5 s each; a checkpoint took 30 s.
    projected = paper_scale.project(10.0, 4.0, 8, 30.0, config)
    evaluations = 1 + 150 // 10  # before training, then every 10 (the last at 150)
    checkpoints = 150 // 5  # every 5 iterations, the last at 150
    assert (projected["evaluations"], projected["checkpoints"]) == (evaluations, checkpoints)
    assert projected["train_hours"] == pytest.approx(150 * 10.0 / 3600)
    assert projected["eval_hours"] == pytest.approx(evaluations * 140 * 0.5 / 3600)
    assert projected["checkpoint_hours"] == pytest.approx(checkpoints * 30.0 / 3600)
    parts = ("train_hours", "eval_hours", "checkpoint_hours")
    assert projected["total_hours"] == pytest.approx(sum(projected[part] for part in parts))
    config.train.iterations, config.eval.group_size = 25, 2  # evaluations at 0, 10, 20 and the end (25)
    assert paper_scale.project(10.0, 4.0, 8, 30.0, config)["evaluations"] == 4
    assert paper_scale.project(10.0, 4.0, 8, 30.0, config)["checkpoints"] == 5  # 5, 10, 15, 20, 25
    assert paper_scale.project(10.0, 4.0, 8, 30.0, config)["eval_hours"] == pytest.approx(4 * 140 * 2 * 0.5 / 3600)
    config.train.iterations = 23  # and one after the last iteration: 5, 10, 15, 20, 23
    assert paper_scale.project(10.0, 4.0, 8, 30.0, config)["checkpoints"] == 5
    config.eval.every = 0
    assert paper_scale.project(10.0, 4.0, 8, 30.0, config)["eval_hours"] == 0.0


def test_what_a_preset_holds_before_activations_counts_autocasts_weight_copies(paper_scale):
    """The presets' arithmetic (README, "Paper scale"), per parameter: float32 weights, gradients
    and AdamW's two moments 16 bytes; autocast's bf16 copies of the trainable weights 2; the
    float32 KL reference 4; ORSD's bf16 verifier 2."""
    parameters = 1_720_574_976  # Qwen3-1.7B with tied embeddings
    held = {
        algo: paper_scale.resident_before_activations(
            load_config("alfworld_qwen3_1.7b", [f"algo.name={algo}"]), parameters
        )
        for algo in ("grpo", "orsd")
    }
    assert held["grpo"]["autocast_weight_copies"] == pytest.approx(2 * parameters / 1e9)
    assert held["grpo"]["total"] == pytest.approx(22 * parameters / 1e9)  # 37.9 GB
    assert held["orsd"]["total"] == pytest.approx(24 * parameters / 1e9)  # 41.3 GB
    float32 = load_config("alfworld_qwen3_1.7b", ["model.inference_dtype=null", "model.update_dtype=null"])
    assert paper_scale.resident_before_activations(float32, parameters)["autocast_weight_copies"] == 0.0


@pytest.mark.slow
def test_paper_scale_runs_at_a_reduced_shape_on_the_cpu(tmp_path):
    out = tmp_path / "paper_scale.json"
    command = [sys.executable, str(PERF / "paper_scale.py"), "--device", "cpu", "--layers", "2", "--hidden", "128"]
    command += ["--tasks", "1", "--group", "2", "--max-turns", "2", "--max-new-tokens", "8", "--json", str(out)]
    command += ["algo.per_algo.orsd.proposal_max_new_tokens=8", "train.threads=1"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["shape"]["num_hidden_layers"] == 2 and record["shape"]["vocab_size"] == 151_936
    assert set(record["results"]) == {"alfworld/grpo", "alfworld/orsd", "webshop/grpo", "webshop/orsd"}
    for name, result in record["results"].items():
        assert result["iteration_seconds"] > 0 and result["projection"]["total_hours"] > 0, name
        assert result["checkpoint"]["seconds"] > 0 and result["projection"]["checkpoint_hours"] > 0, name
        assert result["checkpoint"]["peak_resident_gb"] > 0 and result["resident_before_activations_gb"]["total"] > 0
        assert result["decode"]["side_by_side"]["bare_tokens_per_s"] > 0, name
    # Every group is mixed, so ORSD's whole pipeline ran: it wrote rubrics and replayed them.
    phases = record["results"]["webshop/orsd"]["phases"]
    assert phases["prepare/orsd_total/orsd_propose"] > 0 and phases["prepare/orsd_total/orsd_replay"] > 0
    assert set(record["orsd_over_grpo"]) == {"alfworld", "webshop"}
