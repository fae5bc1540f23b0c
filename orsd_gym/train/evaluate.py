"""Evaluation on the task plan's held-out tasks: during training and for saved checkpoints."""

from __future__ import annotations

import time

import torch

from orsd_gym.policies.base import Policy
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.rollout.collector import PromptEdit, collect
from orsd_gym.rollout.stats import rollout_stats
from orsd_gym.rollout.trajectory import Trajectory
from orsd_gym.train.checkpoint import Checkpoint
from orsd_gym.train.config import Config
from orsd_gym.train.envs import close_envs, make_envs
from orsd_gym.train.plan import TaskPlan, build_task_plan
from orsd_gym.train.seeds import EVAL, iteration_seed
from orsd_gym.train.update import memory_left
from orsd_gym.train.workers import SINGLE, Workers


def evaluate(
    policy: Policy,
    envs,
    plan: TaskPlan,
    config: Config,
    seed: int,
    workers: Workers = SINGLE,
    edit_prompt: PromptEdit | None = None,
) -> tuple[list[Trajectory], dict[str, float]]:
    """Play the plan's evaluation tasks (``eval.group_size`` attempts each, ``eval.temperature``);
    returns the trajectories and per-episode ``eval/*`` metrics. Data-parallel workers each
    play their share of the tasks; worker 0 returns every worker's, the others nothing.
    ``edit_prompt`` changes what the policy is shown (the teacher test's rubrics)."""
    started = time.perf_counter()
    mine = workers.share(len(plan.eval))
    with torch.no_grad():
        trajectories = collect(
            envs,
            policy,
            [plan.eval[i].spec for i in mine],
            group_size=config.eval.group_size,
            sampling=config.rollout.sampling(config.eval.temperature, seed),
            options=config.rollout,
            first_group=mine.start,
            edit_prompt=edit_prompt,
        )
    everyone = workers.gather(trajectories)
    if everyone is None:
        return [], {}
    trajectories = [t for part in everyone for t in part]
    stats = rollout_stats(trajectories)
    result = {f"eval/{k}": v for k, v in stats.items() if k != "env_steps"}
    result["eval/time"] = time.perf_counter() - started
    return trajectories, result


def evaluate_checkpoint(config: Config, checkpoint: Checkpoint) -> tuple[list[Trajectory], dict[str, float]]:
    """A checkpoint's policy (its trainable weights, warm start included) on ``config``'s
    evaluation tasks; nothing is written."""
    plan = build_task_plan(config)
    policy = load_policy(
        config.model.name,
        device=config.model.device,
        dtype=config.model.dtype,
        lora=config.model.lora.settings(),
        inference_dtype=config.model.inference_dtype,
        settings=PolicySettings(token_budget=config.optim.micro_batch_tokens),
    )
    policy.load_state_dict(checkpoint.policy_state)
    policy.generation_budget = memory_left(policy, None, config.optim)
    envs = make_envs(
        config.env, plan.eval_kwargs, config.env.num_envs or config.eval.num_tasks * config.eval.group_size
    )
    try:
        return evaluate(policy, envs, plan, config, seed=iteration_seed(config.train.seed, checkpoint.iteration, EVAL))
    finally:
        close_envs(envs)
