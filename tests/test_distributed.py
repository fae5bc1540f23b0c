"""Data-parallel training on tiny-random: 2 Ray Train workers (gloo) take the step one process
takes on the same task groups, count every episode once, and resume exactly after SIGKILL."""

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

pytest.importorskip("ray")

from resumable_env import ENV_ID  # noqa: E402

from orsd_gym.policies.models import load_policy  # noqa: E402
from orsd_gym.train.checkpoint import latest_good_checkpoint, load_checkpoint  # noqa: E402
from orsd_gym.train.config import load_config  # noqa: E402
from orsd_gym.train.launch import train  # noqa: E402
from orsd_gym.train.metrics import read_metrics  # noqa: E402

ITERATIONS = 2
RUN = [
    "model.name=tiny-random",
    # The module prefix makes every worker import the test env that registers it.
    f"env.id=resumable_env:{ENV_ID}",
    "rollout.tasks_per_iteration=2",
    "rollout.group_size=3",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=8",
    "rollout.action_format=last_line",
    "algo.per_algo.grpo={reward: {outcome: return}}",
    # Adam's first step moves a weight by ~lr whatever its gradient, so a gradient that is pure
    # rounding noise (summed in another order by two workers) can move it by up to ~lr/10.
    "optim.lr=1e-4",
    "eval.every=2",
    "eval.num_tasks=2",
    "train.threads=1",
    "train.keep_checkpoints=5",
    "logging.live=false",
    "logging.tensorboard=false",
]


def _comparable(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "eval/time"} for r in records]


@pytest.fixture(scope="module")
def two_workers(ray_cluster, tmp_path_factory) -> Path:
    """An uninterrupted 2-worker run of ``ITERATIONS`` iterations, launched in this process."""
    out = tmp_path_factory.mktemp("two_workers")
    reuse = out.parent / f"{out.name}-evaluations"
    summary = train(
        load_config(
            None,
            [
                *RUN,
                "train.workers=2",
                f"train.iterations={ITERATIONS}",
                f"train.output_dir={out}",
                f"eval.reuse_dir={reuse}",
            ],
        )
    )
    assert summary.worker == 0 and summary.final_eval is not None
    # Each worker plays its share of an evaluation: none is recorded for reuse or read back.
    assert not reuse.exists()
    assert all("eval/reused" not in json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines())
    return out


def test_two_workers_take_the_one_worker_step_and_count_every_episode_once(two_workers, tmp_path):
    one = tmp_path / "one"
    train(load_config(None, [*RUN, "train.iterations=1", f"train.output_dir={one}"]))
    initial = load_policy("tiny-random").state_dict()
    single = load_checkpoint(one / "checkpoints" / "iter_000001").policy_state
    parallel = load_checkpoint(two_workers / "checkpoints" / "iter_000001").policy_state
    assert max(float((single[k] - initial[k]).abs().max()) for k in single) > 5e-5  # the step is real
    assert max(float((single[k] - parallel[k]).abs().max()) for k in single) < 1e-5

    [a] = read_metrics(one / "metrics.jsonl")
    b = read_metrics(two_workers / "metrics.jsonl")[0]
    # The same 6 episodes were played: episode statistics agree exactly, each counted once.
    assert a["env_steps"] == b["env_steps"] == 6
    assert {k: v for k, v in a.items() if k.startswith("train/")} == {
        k: v for k, v in b.items() if k.startswith("train/")
    }
    assert b["algo/num_groups"] == 2 and b["algo/reward_mean"] == pytest.approx(a["algo/reward_mean"])
    assert b["loss/grad_norm"] == pytest.approx(a["loss/grad_norm"], rel=1e-5)
    audit = [
        json.loads(line) for line in (two_workers / "audit/iter_000001/trajectories.jsonl").read_text().splitlines()
    ]
    assert [t["episode_id"] for t in audit] == list(range(6))
    assert [t["group_id"] for t in audit] == [0, 0, 0, 1, 1, 1]
    assert len(json.loads((two_workers / "audit/iter_000001/token_extras.json").read_text())["advantages"]) == 6


def test_two_workers_lend_shuffled_rubrics_as_one_process_does(ray_cluster, tmp_path):
    """ORSD's negative control lends every mixed group another task's rubric, whichever worker
    played that task, draws the same loans as one process, and keeps the pool in its checkpoint."""
    shuffled = [
        "algo.name=orsd",
        "algo.per_algo.orsd.rubric_source=shuffled",
        "env.kwargs={expert: reset}",
        "train.iterations=1",
    ]
    one, two = tmp_path / "one", tmp_path / "two"
    train(load_config(None, [*RUN, *shuffled, f"train.output_dir={one}"]))
    train(load_config(None, [*RUN, *shuffled, "train.workers=2", f"train.output_dir={two}"]))
    loans = {}
    for run in (one, two):
        groups = json.loads((run / "audit/iter_000001/groups.json").read_text())
        shaped = [g for g in groups if len(set(g["rewards"])) > 1]
        assert len(shaped) == 2  # each worker's only group, and each borrowed from the other's task
        assert all(g["selected"] == 0 and g["lent_from"] not in (None, g["task_key"]) for g in shaped)
        loans[run] = [(g["task_key"], g["lent_from"], g["selected_rubric"]) for g in groups]
        pool = load_checkpoint(run / "checkpoints" / "iter_000001").state["algorithm"]["shuffled_pool"]
        assert sorted(pool) == sorted(g["task_key"] for g in groups)
    assert loans[one] == loans[two]
    single = load_checkpoint(one / "checkpoints" / "iter_000001").policy_state
    parallel = load_checkpoint(two / "checkpoints" / "iter_000001").policy_state
    assert max(float((single[k] - parallel[k]).abs().max()) for k in single) < 1e-5


def test_two_workers_take_the_one_worker_gigpo_step(ray_cluster, tmp_path):
    """GiGPO's anchor groups stay within a task's group, which one worker plays whole, and its
    anchor statistics pool every worker's turns: 2 workers step as 1 does."""
    gigpo = ["algo.name=gigpo", "algo.per_algo.gigpo.omega=0.5", "train.iterations=1", "eval.every=0"]
    one, two = tmp_path / "one", tmp_path / "two"
    train(load_config(None, [*RUN, *gigpo, f"train.output_dir={one}"]))
    train(load_config(None, [*RUN, *gigpo, "train.workers=2", f"train.output_dir={two}"]))
    single = load_checkpoint(one / "checkpoints" / "iter_000001").policy_state
    parallel = load_checkpoint(two / "checkpoints" / "iter_000001").policy_state
    assert max(float((single[k] - parallel[k]).abs().max()) for k in single) < 1e-5
    [a], [b] = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    # One turn per episode, all from the task's reset observation: every turn is anchored.
    assert a["gigpo/anchored_turn_frac"] == b["gigpo/anchored_turn_frac"] == 1.0
    for key in ("gigpo/anchor_group_size", "gigpo/step_adv_abs_mean", "gigpo/episode_adv_abs_mean"):
        assert b[key] == pytest.approx(a[key], rel=1e-6)


def _train_cli(out: Path) -> subprocess.Popen:
    """A 2-worker ``orsd-gym train`` driver on the test session's Ray (found through RAY_ADDRESS)."""
    code = "import sys; from orsd_gym.cli import main; sys.exit(main(sys.argv[1:]))"
    config = out.parent / "empty.yaml"
    config.write_text("{}\n")
    args = [sys.executable, "-c", code, "train", "--config", str(config), "--no-live"]
    args += [*RUN, "train.workers=2", f"train.iterations={ITERATIONS}", f"train.output_dir={out}"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for_free_cpus(ray, cpus: float) -> None:
    """The killed driver's workers are gone once their CPUs are free again."""
    deadline = time.time() + 120
    while ray.available_resources().get("CPU", 0) < cpus:
        assert time.time() < deadline, "the killed run's workers kept their CPUs"
        time.sleep(0.2)


def test_sigkill_of_a_two_worker_run_then_resume(two_workers, ray_cluster, tmp_path):
    interrupted = tmp_path / "interrupted"
    process = _train_cli(interrupted)
    deadline = time.time() + 300
    while not (interrupted / "checkpoints" / "iter_000001").exists():
        assert process.poll() is None, f"the run ended before it could be killed: {process.stderr.read()[-2000:]}"
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (interrupted / "checkpoints" / f"iter_{ITERATIONS:06d}").exists()
    _wait_for_free_cpus(ray_cluster, 2)

    config = load_config(
        None, [*RUN, "train.workers=2", f"train.iterations={ITERATIONS}", f"train.output_dir={interrupted}"]
    )
    assert train(config, resume=True).resumed_from == 1
    assert _comparable(read_metrics(interrupted / "metrics.jsonl")) == _comparable(
        read_metrics(two_workers / "metrics.jsonl")
    )
    final_a = latest_good_checkpoint(two_workers / "checkpoints").policy_state
    final_b = latest_good_checkpoint(interrupted / "checkpoints").policy_state
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)


def test_torchrun_runs_the_same_workers(two_workers, tmp_path):
    """``torchrun -m orsd_gym.cli train``: two gloo processes, no Ray, the same first iteration."""
    out = tmp_path / "torchrun"
    config = tmp_path / "empty.yaml"
    config.write_text("{}\n")
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args += ["-m", "orsd_gym.cli", "train", "--config", str(config), "--no-live"]
    args += [*RUN, "train.iterations=1", f"train.output_dir={out}"]  # train.workers: torchrun's 2
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("done.") == 1  # worker 0 alone reports the run
    [record] = _comparable(read_metrics(out / "metrics.jsonl"))
    reference = _comparable(read_metrics(two_workers / "metrics.jsonl"))[0]
    assert {k: v for k, v in record.items() if not k.startswith("eval/")} == {
        k: v for k, v in reference.items() if not k.startswith("eval/")
    }
