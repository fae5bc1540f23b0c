"""Evaluations played once and read back: the same policy on the same tasks with the same settings.

Every arm of a comparison whose seeds share a warm start evaluates that same start at iteration
0: the same weights, the same held-out tasks, greedy decoding, so the same episodes. With
``eval.reuse_dir`` the first run to play it records it there and the others read it back instead
of playing it again. What decides that two evaluations are the same is the key, a digest of
everything the episodes depend on:

* the policy's trainable weights, bit for bit, and the model settings (name, precision, LoRA);
* the env settings and its evaluation side's arguments, the rollout, evaluation and update
  settings (the memory budget sets how many episodes share a batch);
* the plan's evaluation tasks (their ids, reset seeds and keys);
* the sampling seed, where sampling is not greedy;
* this process's torch threads and deterministic flag (float sums depend on them), the
  package's source, and torch's and transformers' versions.

Only a single-process evaluation of the policy as it is (no prompt edit, as the teacher test
makes) is reused. A reused evaluation says so (``eval/reused`` 1; ``eval/time`` is the time the
read took).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch
import transformers

import orsd_gym
from orsd_gym import configio, jsonio
from orsd_gym.policies.base import Policy
from orsd_gym.rollout.collector import PromptEdit
from orsd_gym.rollout.trajectory import Trajectory, load_jsonl, save_jsonl
from orsd_gym.train.config import Config
from orsd_gym.train.evaluate import evaluate
from orsd_gym.train.plan import TaskPlan
from orsd_gym.train.workers import Workers
from orsd_gym.writable import write_file

METRICS, TRAJECTORIES, SETTINGS = "metrics.json", "trajectories.jsonl", "settings.json"


def evaluate_or_reuse(
    policy: Policy, envs, plan: TaskPlan, config: Config, seed: int, workers: Workers, edit: PromptEdit | None
) -> tuple[list[Trajectory], dict[str, float]]:
    """`orsd_gym.train.evaluate.evaluate`, read back from ``eval.reuse_dir`` where the same
    evaluation was recorded there (and recorded there where it was not)."""
    if config.eval.reuse_dir is None or edit is not None or workers.size > 1:
        return evaluate(policy, envs, plan, config, seed, workers, edit)
    key, settings = evaluation_key(policy, plan, config, seed)
    directory = Path(config.eval.reuse_dir) / key
    found = read_evaluation(directory)
    if found is not None:
        return found
    trajectories, metrics = evaluate(policy, envs, plan, config, seed, workers, edit)
    record_evaluation(directory, trajectories, metrics, settings)
    return trajectories, metrics


def evaluation_key(policy: Policy, plan: TaskPlan, config: Config, seed: int) -> tuple[str, dict[str, Any]]:
    """The key of an evaluation (a hex digest) and the settings it covers (for a reader)."""
    evaluation = {k: v for k, v in configio.to_dict(config.eval).items() if k not in ("every", "reuse_dir")}
    settings = {
        "model": configio.to_dict(config.model),
        # How many episodes share a batch (envs, memory budget) moves float sums too.
        "env": {**configio.to_dict(config.env), "eval_kwargs": plan.eval_kwargs},
        "optim": configio.to_dict(config.optim),
        "rollout": configio.to_dict(config.rollout),
        "eval": evaluation,
        "tasks": [dataclasses.asdict(task) for task in plan.eval],
        "sampling_seed": seed if config.eval.temperature > 0 else None,
        "torch_threads": torch.get_num_threads(),
        "deterministic": config.train.deterministic,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "source": source_digest(),
    }
    digest = hashlib.blake2b(digest_size=16)
    digest.update(jsonio.dumps(settings, sort_keys=True).encode("utf-8"))
    for name, tensor in sorted(policy.state_dict().items()):
        digest.update(name.encode("utf-8"))
        digest.update(str(tensor.dtype).encode("utf-8"))
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest(), settings


@functools.cache
def source_digest() -> str:
    """A digest of the package's Python source: a change to the code is another evaluation."""
    digest = hashlib.blake2b(digest_size=16)
    root = Path(orsd_gym.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode("utf-8"))
        digest.update(path.read_bytes())
    return digest.hexdigest()


def read_evaluation(directory: Path) -> tuple[list[Trajectory], dict[str, float]] | None:
    """The evaluation recorded in ``directory``, or None when there is none (or only part of one)."""
    metrics_path = directory / METRICS
    if not metrics_path.is_file():
        return None
    started = time.perf_counter()
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
        trajectories = load_jsonl(directory / TRAJECTORIES)
    except (OSError, ValueError, TypeError, KeyError):
        return None  # a torn record: the evaluation is played again and recorded anew
    return trajectories, {**metrics, "eval/reused": 1.0, "eval/time": time.perf_counter() - started}


def record_evaluation(
    directory: Path, trajectories: list[Trajectory], metrics: dict[str, float], settings: dict[str, Any]
) -> None:
    """Record an evaluation for reuse: its trajectories first, its metrics last (a record without
    metrics is not read)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_file(directory / SETTINGS, jsonio.dumps(settings, indent=1), "the reused evaluation's settings")
    save_jsonl(trajectories, directory / TRAJECTORIES)
    write_file(directory / METRICS, jsonio.dumps(metrics, indent=1), "the reused evaluation's metrics")
