"""Did distillation happen at all? The policy's log-probability of the expert's next action,
without any rubric, on held-out states the expert visits, before and after training.

ORSD distils the policy with a rubric in its context into the policy without one. A success
rate over a hundred tasks can miss that; this probe measures it directly. The env's expert
(``warm_start.env_kwargs``: what makes it report its plan) plays the run's held-out evaluation
tasks, and every step it takes is kept as the policy would see it there, with no rubric: the
prompt, and the expert's action as the completion (`expert_states`, laid out by the same
collector as rollouts and demonstrations). A policy's score on them (`expert_logprob`) is the
mean log-probability per token of the expert's actions; a run's probe (`probe_change`) is its
final policy's score minus its starting policy's on the same states, so the held-out tasks and
the expert's path cancel out and only the weights differ (runs that share a starting policy
share its score).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import torch

from orsd_gym import configio
from orsd_gym.policies.base import Policy
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.rollout.collector import Teacher, collect, expert_teacher
from orsd_gym.rollout.trajectory import Trajectory, load_jsonl, save_jsonl
from orsd_gym.train.checkpoint import latest_good_checkpoint
from orsd_gym.train.config import Config
from orsd_gym.train.envs import close_envs, make_envs
from orsd_gym.train.plan import build_task_plan

#: Sequences scored per forward pass (the policy still splits them under its token budget).
SCORE_BATCH = 8


def expert_states(config: Config, policy: Policy, num_tasks: int) -> list[Trajectory]:
    """The expert's episodes on the first ``num_tasks`` held-out evaluation tasks of
    ``config``'s task plan, without any rubric, as samples whose completions are the expert's
    actions (``policy`` only renders and tokenises them: the expert chooses every action)."""
    plan = build_task_plan(config, iterations=0)
    tasks = plan.eval[:num_tasks]
    if not tasks:
        raise ValueError(f"the probe needs held-out tasks: the plan has {len(plan.eval)}, asked for {num_tasks}")
    envs = make_envs(config.env, configio.merge(plan.eval_kwargs, config.warm_start.env_kwargs), count=1)
    try:
        return collect(
            envs, Teacher(policy, expert_teacher), [task.spec for task in tasks], group_size=1, options=config.rollout
        )
    finally:
        close_envs(envs)


def expert_logprob(policy: Policy, states: Sequence[Trajectory]) -> dict[str, float]:
    """The policy's mean log-probability per token of the expert's actions in ``states``
    (``logprob``), over ``tokens`` action tokens of ``samples`` samples."""
    total, tokens = 0.0, 0
    for start in range(0, len(states), SCORE_BATCH):
        batch = states[start : start + SCORE_BATCH]
        with torch.no_grad():
            scored = policy.score([s.token_ids for s in batch], [s.loss_mask for s in batch], precision="weights")
        for logprobs, state in zip(scored, batch, strict=True):
            mask = torch.tensor(state.loss_mask, dtype=logprobs.dtype)
            total += float((logprobs.float() * mask).sum())
            tokens += int(sum(state.loss_mask))
    return {"logprob": total / tokens if tokens else math.nan, "tokens": float(tokens), "samples": float(len(states))}


def policy_with(config: Config, weights: dict[str, torch.Tensor] | None = None) -> Policy:
    """``config``'s model as its runs load it (with their seed), holding ``weights`` if given."""
    model = config.model
    policy = load_policy(
        model.name,
        device=model.device,
        dtype=model.dtype,
        lora=model.lora.settings(),
        settings=PolicySettings(seed=config.train.seed),
    )
    if weights is not None:
        policy.load_state_dict(weights)
    policy.set_training(False)
    return policy


def final_weights(run_dir: str | Path) -> dict[str, torch.Tensor] | None:
    """The policy weights of a run's newest good checkpoint (None: it kept none)."""
    checkpoint = latest_good_checkpoint(Path(run_dir) / "checkpoints")
    return checkpoint.policy_state if checkpoint is not None else None


def probe_change(start: dict[str, float], end: dict[str, float]) -> dict[str, float]:
    """The probe of one run from `expert_logprob` under its starting and its final weights (on
    the same states): both, and the change (end - start)."""
    if (start["tokens"], start["samples"]) != (end["tokens"], end["samples"]):
        raise ValueError("the probe compares scores of the same states: these were scored on different ones")
    return {**{k: start[k] for k in ("tokens", "samples")}, "start": start["logprob"], "end": end["logprob"],
            "change": end["logprob"] - start["logprob"]}  # fmt: skip


def cached_states(config: Config, num_tasks: int, path: str | Path) -> list[Trajectory]:
    """`expert_states`, played once and kept at ``path`` (JSON lines): every run of a study is
    probed on the very same samples."""
    path = Path(path)
    if path.is_file():
        return load_jsonl(path)
    states = expert_states(config, policy_with(config), num_tasks)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    save_jsonl(states, partial)
    partial.replace(path)
    return states
