"""Behaviour cloning warm start: fine-tune the policy on an env expert's demonstrations.

RL needs some successes to learn from: a group whose attempts all fail has zero GRPO
advantage. A model too small to ever succeed zero-shot (SmolLM2-135M on ALFWorld) first
imitates the env's expert (ALFWorld's planner, ``info["expert_actions"]``) on training tasks.
Demonstrations are played through the same collector, prompts and masking as rollouts, so the
cloned tokens are exactly where the policy's own actions will later be; the loss is the mean
negative log-likelihood of those tokens.

What the demonstrations show may be edited (a `PromptEdit` of demonstration ``n`` as group
``n``): a run's probes give the edit (`orsd_gym.train.callbacks.TrainerCallback.demonstration_edit`;
ORSD's rubric demonstrations, `orsd_gym.probes.rubric_demonstrations`, show a share of them
with their task's expert rubric in context).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from orsd_gym import configio, progress
from orsd_gym.policies.base import Policy
from orsd_gym.profiling import phase
from orsd_gym.rollout.collector import PromptEdit, Teacher, collect, expert_teacher
from orsd_gym.rollout.trajectory import Trajectory
from orsd_gym.train.clone_progress import (
    SAVE_EVERY_SECONDS,
    CloneProgress,
    fingerprint,
    load_progress,
    progress_path,
    save_progress,
)
from orsd_gym.train.config import Config
from orsd_gym.train.envs import close_envs, make_envs
from orsd_gym.train.plan import TaskPlan
from orsd_gym.writable import write_with

#: Where the warm-start file keeps its cloning metrics (safetensors metadata, a JSON string).
METRICS_KEY = "orsd_gym.warm_start_metrics"


def collect_demonstrations(
    config: Config, plan: TaskPlan, policy: Policy, edit: PromptEdit | None = None
) -> list[Trajectory]:
    """Expert episodes on the plan's warm-start tasks (training tasks only), laid out exactly
    like the policy's rollouts, their prompts edited by ``edit`` (demonstration ``n`` is group ``n``)."""
    envs = make_envs(config.env, configio.merge(plan.train_kwargs, config.warm_start.env_kwargs), count=1)
    try:
        return collect(
            envs,
            Teacher(policy, expert_teacher),
            [task.spec for task in plan.warm_start],
            group_size=1,
            options=config.rollout,
            edit_prompt=edit,
        )
    finally:
        close_envs(envs)


def clone(
    policy: Policy, demonstrations: list[Trajectory], config: Config, progress_file: Path | None = None
) -> dict[str, float]:
    """Fit the policy to the successful demonstrations; return metrics. With ``progress_file``
    the cloning saves its progress there as it goes and continues from what it finds there
    (`orsd_gym.train.clone_progress`: exactly as if it had not stopped)."""
    ws = config.warm_start
    demos = [d for d in demonstrations if d.success]
    if not demos:
        raise RuntimeError("the expert won none of the warm-start episodes; check the env's expert (expert=True)")
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=ws.lr, weight_decay=0.0)
    seed = ws.demonstration_seed(config.train.seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xBC, 1]))
    settings = {"lr": ws.lr, "batch_size": ws.batch_size, "grad_clip": config.optim.grad_clip, "seed": seed}
    saver = _ProgressSaver(progress_file, policy, optimizer, fingerprint(demos, settings))
    state = saver.restore()
    policy.set_training(True)
    try:
        while state.epoch < ws.epochs:
            progress.step(f"cloning, epoch {state.epoch + 1}/{ws.epochs}")
            _clone_epoch(policy, demos, optimizer, rng, config, state, saver)
    finally:
        policy.set_training(False)
        # The gradients are not needed again before the first update: free them for the rollouts.
        for parameter in policy.trainable_parameters():
            parameter.grad = None
    return {
        "warm_start/demos": float(len(demos)),
        "warm_start/expert_success": len(demos) / len(demonstrations),
        "warm_start/first_epoch_nll": state.losses[0],
        "warm_start/last_epoch_nll": state.losses[-1],
        "warm_start/demos_with_rubric": float(sum(1 for d in demos if d.extra.get("privileged_prompt"))),
    }


class _ProgressSaver:
    """Saves the cloning's progress to a file (none: ``path`` None) at every epoch's end and
    after a step once `SAVE_EVERY_SECONDS` have passed since the last save."""

    def __init__(self, path: Path | None, policy: Policy, optimizer: torch.optim.Optimizer, mark: str) -> None:
        self.path, self.policy, self.optimizer, self.mark = path, policy, optimizer, mark
        self.last = time.monotonic()

    def restore(self) -> CloneProgress:
        """The progress saved at ``path`` (loaded into the policy and optimiser), else a fresh start."""
        if self.path is None:
            return CloneProgress()
        state, unused = load_progress(self.path, self.policy, self.optimizer, self.mark)
        if unused:
            progress.announce(f"cloning from the start: the progress in {self.path} is not used: {unused}")
        if state is None:
            return CloneProgress()
        where = f"epoch {state.epoch + 1}, step {state.next_batch + 1}"
        progress.announce(f"continuing the cloning from {self.path}: {where}")
        return state

    def __call__(self, state: CloneProgress, epoch_done: bool) -> None:
        if self.path is None or not (epoch_done or time.monotonic() - self.last >= SAVE_EVERY_SECONDS):
            return
        save_progress(self.path, state, self.policy, self.optimizer, self.mark)
        self.last = time.monotonic()


def _clone_epoch(
    policy: Policy,
    demos: list[Trajectory],
    optimizer: torch.optim.Optimizer,
    rng: np.random.Generator,
    config: Config,
    state: CloneProgress,
    save: _ProgressSaver,
) -> None:
    """The rest of one pass over the demonstrations, from ``state``; ``state`` then stands at the
    next epoch, this one's mean NLL per cloned token appended to its losses."""
    if state.epoch_rng is None:
        state.epoch_rng = rng.bit_generator.state
    else:  # continued: draw this epoch's order again, as the uninterrupted loop drew it
        rng.bit_generator.state = state.epoch_rng
    order = rng.permutation(len(demos))
    size = config.warm_start.batch_size
    starts = range(0, len(demos), size)
    for index in range(state.next_batch, len(starts)):
        batch = [demos[i] for i in order[starts[index] : starts[index] + size]]
        tokens = sum(sum(d.loss_mask) for d in batch)
        optimizer.zero_grad(set_to_none=True)
        batch_loss = 0.0
        for demo in batch:
            # One demonstration per backward pass: no padding to the batch's longest (per-step
            # samples differ in length by a page), and one demonstration's activations at a time.
            [logprobs] = policy.score([demo.token_ids], [demo.loss_mask], with_grad=True)
            loss = -(logprobs * torch.tensor(demo.loss_mask, dtype=logprobs.dtype)).sum() / tokens
            loss.backward()
            batch_loss += loss.item()
        torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), config.optim.grad_clip or float("inf"))
        optimizer.step()
        state.epoch_loss += batch_loss * tokens
        state.epoch_tokens += tokens
        state.next_batch = index + 1
        if state.next_batch == len(starts):
            state.losses.append(state.epoch_loss / state.epoch_tokens)
            state.epoch, state.next_batch, state.epoch_rng = state.epoch + 1, 0, None
            state.epoch_loss, state.epoch_tokens = 0.0, 0
        save(state, epoch_done=state.next_batch == 0 and state.epoch < config.warm_start.epochs)


def ensure_warm_start(
    config: Config, plan: TaskPlan, policy: Policy, path: str | Path, edit: PromptEdit | None = None
) -> dict[str, float] | None:
    """Load the warm-start weights from ``path`` if they exist, else make and save them from
    demonstrations edited by ``edit`` (see `collect_demonstrations`).

    Returns the cloning metrics, saved in the file beside the weights, so that every run
    starting from a shared warm start records what it was (None: a file without them). The file
    is written atomically, so an interrupted run clones again rather than loading half a file.
    """
    path = Path(path)
    if path.is_file():
        policy.load_state_dict(load_file(path))
        with safe_open(path, framework="pt") as handle:
            saved = (handle.metadata() or {}).get(METRICS_KEY)
        return {**json.loads(saved), "warm_start/loaded": 1.0} if saved else None
    with phase("warm_start") as timer, progress.phase("warm start"):
        progress.step("playing the demonstrations")
        demonstrations = collect_demonstrations(config, plan, policy, edit)
        metrics = clone(policy, demonstrations, config, progress_path(path))
    metrics["warm_start/time"] = timer.seconds
    tensors = {k: v.detach().contiguous().cpu() for k, v in policy.state_dict().items()}
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    write_with(
        path,
        "the warm start's weights",
        lambda partial: save_file(tensors, partial, metadata={METRICS_KEY: json.dumps(metrics)}),
        size=size,
    )
    progress_path(path).unlink(missing_ok=True)  # what it saved is in the warm start now
    return metrics
