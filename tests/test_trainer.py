"""The trainer end to end on tiny-random: metrics, checkpoints, audit, and exact resume after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from resumable_env import ENV_ID

from orsd_gym.errors import ConfigError
from orsd_gym.train.checkpoint import latest_good_checkpoint
from orsd_gym.train.config import load_config
from orsd_gym.train.metrics import read_metrics
from orsd_gym.train.plan import task_plan
from orsd_gym.train.trainer import Trainer

TESTS = Path(__file__).parent / "helpers"

VOWEL_RUN = [
    "model.name=tiny-random",
    f"env.id={ENV_ID}",
    "rollout.tasks_per_iteration=2",
    "rollout.group_size=3",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=8",
    "rollout.action_format=last_line",
    "algo.per_algo.grpo={reward: {outcome: return}}",
    "optim.lr=0.01",
    "eval.every=2",
    "eval.num_tasks=2",
    "train.threads=1",
    "logging.live=false",
    "logging.tensorboard=false",
]


def _comparable(records):
    """Metrics minus wall-clock times (which no two runs share)."""
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "eval/time"} for r in records]


def test_bad_config_fails_before_loading_anything():
    with pytest.raises(ConfigError, match="algo.name"):
        load_config(None, ["algo.name=ppo2"])
    with pytest.raises(ConfigError, match="algo.per_algo.grpo.not_a_key"):
        load_config(None, ["algo.per_algo.grpo={not_a_key: 1}"])
    with pytest.raises(ConfigError, match="set rollout.temperature"):
        load_config(None, ["rollout.temperature=0.7", "algo.per_algo.grpo={temperature: 1.0}"])


def test_training_tasks_are_shared_across_algorithms():
    run = ["env.id=orsd_gym/GuessNumber-v0", "train.seed=3", "rollout.tasks_per_iteration=3", "eval.num_tasks=4"]
    grpo = task_plan(load_config(None, ["algo.name=grpo", *run]), 3)
    orsd = task_plan(load_config(None, ["algo.name=orsd", *run]), 3)
    assert grpo == orsd
    assert grpo["train"][:3] != grpo["train"][3:6]
    other_seed = task_plan(load_config(None, ["algo.name=grpo", *run, "train.seed=4"]), 3)
    assert other_seed["train"] != grpo["train"] and other_seed["eval"] == grpo["eval"]


@pytest.mark.slow
def test_orsd_run_on_generated_alfworld(tmp_path):
    pytest.importorskip("textworld")
    config = load_config(
        None,
        [
            "model.name=tiny-random",
            "algo.name=orsd",
            "env.id=orsd_gym/ALFWorld-v0",
            "env.kwargs={generator: {num_tasks: 4, max_receptacles: 4, num_distractors: 1}}",
            "rollout.tasks_per_iteration=1",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=8",
            "rollout.max_episode_tokens=1024",
            "train.iterations=1",
            "eval.every=1",
            "eval.num_tasks=1",
            "algo.per_algo.orsd.num_bundles=2",
            f"train.output_dir={tmp_path}",
            "train.threads=1",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    summary = Trainer(config).run()
    assert summary.final_eval is not None and "eval/success_rate" in summary.final_eval
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 1 and records[0]["env_steps"] > 0 and "orsd/rubric_frac" in records[0]
    assert latest_good_checkpoint(tmp_path / "checkpoints").iteration == 1
    audit = tmp_path / "audit" / "iter_000001"
    assert len((audit / "trajectories.jsonl").read_text().splitlines()) == 2
    groups = json.loads((audit / "groups.json").read_text())
    assert groups and "bundles" in groups[0]

    from orsd_gym.cli import main

    page = tmp_path / "credit.html"
    assert main(["inspect", str(tmp_path), "--iteration", "1", "--trajectory", "1", "--html", str(page)]) == 0
    assert "<!doctype html>" in page.read_text() and "Rubric" in page.read_text()
    assert main(["inspect", str(tmp_path), "--iteration", "9"]) == 2  # no such audit: a clear error


def _train_cli(out: Path, iterations: int, *, resume: bool = False, wait: bool = True):
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import resumable_env; "
        "from orsd_gym.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    config = out.parent / "vowel.yaml"  # every setting comes from VOWEL_RUN's overrides
    config.write_text("{}\n")
    args = [
        sys.executable,
        "-c",
        code,
        "train",
        "--config",
        str(config),
        "--no-live",
        *(["--resume"] if resume else []),
        *VOWEL_RUN,
        f"train.iterations={iterations}",
        f"train.output_dir={out}",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if wait:
        return subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    iterations = 4
    reference = tmp_path / "reference"
    done = _train_cli(reference, iterations)
    assert done.returncode == 0, done.stderr[-2000:]

    interrupted = tmp_path / "interrupted"
    process = _train_cli(interrupted, iterations, wait=False)
    deadline = time.time() + 300
    while not (interrupted / "checkpoints" / "iter_000002").exists():
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (interrupted / "checkpoints" / f"iter_{iterations:06d}").exists()

    resumed = _train_cli(interrupted, iterations, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert _comparable(read_metrics(interrupted / "metrics.jsonl")) == _comparable(
        read_metrics(reference / "metrics.jsonl")
    )
    final_a = latest_good_checkpoint(reference / "checkpoints").policy_state
    final_b = latest_good_checkpoint(interrupted / "checkpoints").policy_state
    assert final_a.keys() == final_b.keys()
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)
    # The run really learned something: weights moved from their initial values.
    first = json.loads((reference / "metrics.jsonl").read_text().splitlines()[0])
    assert first["algo/zero_adv_group_frac"] < 1.0


def test_resume_skips_a_corrupt_newest_checkpoint(tmp_path):
    config = load_config(None, [*VOWEL_RUN, "train.iterations=2", f"train.output_dir={tmp_path}", "eval.every=0"])
    Trainer(config).run()
    newest = tmp_path / "checkpoints" / "iter_000002"
    (newest / "policy.safetensors").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="skipping damaged checkpoint"):
        summary = Trainer(config, resume=True).run()
    assert summary.resumed_from == 1
    assert [r["iteration"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_the_verifier_is_held_in_model_verifier_dtype(tmp_path):
    config = load_config(None, [*VOWEL_RUN, "algo.name=orsd", "model.verifier_dtype=bfloat16"])
    config.train.output_dir = str(tmp_path / "run")
    trainer = Trainer(config)
    assert trainer.algorithm.verifier.model.dtype == torch.bfloat16
    assert trainer.policy.model.dtype == torch.float32  # sampling and updates stay in float32


@pytest.mark.slow
def test_the_webshop_cpu_preset_runs_end_to_end_at_tiny_size(tmp_path, monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)  # the embedded synthetic catalog
    config = load_config(
        "webshop_cpu",
        [
            "model.name=tiny-random",
            "rollout.tasks_per_iteration=1",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "warm_start.episodes=2",
            "warm_start.epochs=1",
            "train.iterations=1",
            "eval.every=1",
            "eval.num_tasks=2",
            f"train.output_dir={tmp_path}",
            "train.threads=1",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    summary = Trainer(config).run()
    assert summary.final_eval is not None and "eval/mean_return" in summary.final_eval
    [record] = read_metrics(tmp_path / "metrics.jsonl")
    assert record["env_steps"] > 0
    assert json.loads((tmp_path / "warm_start.json").read_text())["warm_start/demos"] > 0
    samples = (tmp_path / "audit" / "iter_000001" / "trajectories.jsonl").read_text().splitlines()
    assert len(samples) >= 2 and all(json.loads(line)["step"] is not None for line in samples)  # one per step


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_an_iteration_with_no_learning_signal_skips_its_update_and_says_so(tmp_path, kl_coef):
    """tiny-random never wins GuessNumber: every group's rewards are equal, so GRPO's advantages
    are all 0 and the update is skipped (weights as they started, the schedule advanced); a KL
    term can still pull on the policy, so with one the update runs (at the reference it pulls
    nowhere: the weights stay)."""
    from orsd_gym.policies.models import load_policy

    overrides = [
        "model.name=tiny-random",
        "env.id=orsd_gym/GuessNumber-v0",
        "env.kwargs={}",
        "rollout.tasks_per_iteration=2",
        "rollout.group_size=2",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=4",
        "eval.num_tasks=2",
        f"algo.per_algo.grpo.kl_coef={kl_coef}",
        "optim.scheduler=linear",
        "eval.every=0",
        "train.iterations=1",
        "train.threads=1",
        "logging.live=false",
        "logging.tensorboard=false",
        f"train.output_dir={tmp_path}",
    ]
    trainer = Trainer(load_config(None, overrides))
    trainer.run()
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["algo/zero_adv_group_frac"] for r in records] == [1.0]
    assert [r["loss/skipped"] for r in records] == [float(kl_coef == 0)]
    assert ("loss/grad_norm" in records[0]) is (kl_coef > 0)
    assert records[-1]["lr"] == 0.0  # the linear schedule reached its end either way
    start = load_policy("tiny-random").state_dict()
    assert all(torch.equal(trainer.policy.state_dict()[k], start[k]) for k in start)
