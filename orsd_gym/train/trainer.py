"""The training loop: sample tasks -> rollouts (groups) -> advantages -> updates -> eval -> log.

Which tasks are trained on, evaluated on and cloned from is the run's task plan
(`orsd_gym.train.plan`: evaluation held out by construction), written to ``task_plan.json``.
Everything else an iteration depends on is derived from ``(train.seed, iteration)``: the
sampling noise of the rollouts, the algorithm's own randomness. A resumed run therefore replays
exactly what the uninterrupted run would have done, and two algorithms run with the same seed
see the same training tasks and the same held-out evaluation tasks.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from safetensors.torch import load_file

from orsd_gym import configio
from orsd_gym.train.checkpoint import (
    join_optimizer_state,
    latest_good_checkpoint,
    save_checkpoint,
    split_optimizer_state,
)
from orsd_gym.train.config import Config, validate_algo
from orsd_gym.train.console import LiveView
from orsd_gym.train.metrics import MetricsWriter
from orsd_gym.train.plan import PlannedTask, build_task_plan
from orsd_gym.train.stats import rollout_stats

# Disjoint streams of per-iteration randomness (seed sequences are keyed by these tags; 0 draws
# the iteration's training tasks in `orsd_gym.train.plan`).
_ROLLOUT, _ALGO, _EVAL, _UPDATE = 1, 2, 3, 4


def iteration_seed(base_seed: int, iteration: int, stream: int) -> int:
    """A 31-bit seed for one stream of one iteration, independent across streams."""
    return int(np.random.SeedSequence([base_seed, iteration, stream]).generate_state(1)[0] & 0x7FFFFFFF)


@dataclass
class RunSummary:
    output_dir: Path
    iterations_done: int
    final_eval: dict[str, float] | None
    resumed_from: int | None


class Trainer:
    """Runs one training job described by a `Config`."""

    def __init__(self, config: Config, *, resume: bool = False, live: bool | None = None) -> None:
        self.config = config
        self.algo_config = validate_algo(config)
        #: The tasks this run plays; built (and checked) before any model or engine loads.
        self.plan = build_task_plan(config)
        self.output_dir = Path(config.train.output_dir)
        self.resume = resume
        self.live = config.logging.live if live is None else live
        self._env = None
        self._eval_env = None

    # ------------------------------------------------------------------ set-up
    def _setup_torch(self) -> None:
        if self.config.train.threads:
            torch.set_num_threads(self.config.train.threads)
        if self.config.train.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)

    def _build(self) -> None:
        from orsd_gym.algos.base import make_algorithm
        from orsd_gym.policies.models import load_policy

        cfg = self.config
        self.policy = self._load_policy()
        self.warm_start_metrics = self._warm_start()
        # Reference and verifier are frozen copies of the *initial* weights, taken before a
        # checkpoint is loaded, so a resumed run judges with the same models as the original.
        reference = self.policy.copy_frozen() if getattr(self.algo_config, "kl_coef", 0.0) > 0 else None
        verifier = None
        algorithm_class = _algorithm_class(cfg.algo.name)
        if getattr(algorithm_class, "uses_verifier", False):
            verifier = (
                load_policy(cfg.model.verifier, device=cfg.model.device, dtype=cfg.model.dtype).copy_frozen()
                if cfg.model.verifier
                else self.policy.copy_frozen()
            )
        self.algorithm = make_algorithm(cfg.algo.name, self.algo_config, reference=reference, verifier=verifier)
        params = self.policy.trainable_parameters()
        if not params:
            raise ValueError("the policy has no trainable parameters")
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2), weight_decay=cfg.optim.weight_decay
        )
        total_steps = max(1, cfg.train.iterations * cfg.optim.epochs * cfg.optim.minibatches)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _schedule(cfg.optim, total_steps))

    def _warm_start(self) -> dict[str, float] | None:
        """Start from ``model.init_weights`` or a (cached) behaviour-cloning warm start."""
        from orsd_gym.train.warm_start import ensure_warm_start

        cfg = self.config
        if cfg.model.init_weights:
            path = Path(cfg.model.init_weights)
            if not path.is_file():
                raise FileNotFoundError(f"model.init_weights={str(path)!r} does not exist")
            self.policy.load_state_dict(load_file(path))
        if cfg.warm_start.episodes > 0:
            path = Path(cfg.warm_start.path) if cfg.warm_start.path else self.output_dir / "warm_start.safetensors"
            return ensure_warm_start(cfg, self.plan, self.policy, path)
        return None

    def _load_policy(self):
        from orsd_gym.policies.models import load_policy

        model, seed = self.config.model, self.config.train.seed
        lora = None
        if model.lora.enabled:
            lora = {"r": model.lora.r, "alpha": model.lora.alpha, "dropout": model.lora.dropout,
                    "target_modules": tuple(model.lora.target_modules)}
        return load_policy(model.name, device=model.device, dtype=model.dtype, lora=lora, seed=seed)

    def _make_env(self, env_kwargs: dict[str, Any], episodes: int):
        """The envs played side by side, kept for the whole run (reset per slot by the
        collector): a list of in-process envs, or an async vector env (one subprocess each)."""
        import gymnasium as gym

        import orsd_gym  # noqa: F401  (registers envs)

        cfg = self.config.env
        kwargs = dict(env_kwargs)
        if cfg.max_episode_steps is not None:
            kwargs["max_episode_steps"] = cfg.max_episode_steps
        n = cfg.num_envs or episodes
        if cfg.vectorization == "async":
            return gym.make_vec(cfg.id, num_envs=n, vectorization_mode="async", **kwargs)
        return [gym.make(cfg.id, **kwargs) for _ in range(n)]

    @property
    def env(self):
        """The training side's envs."""
        if self._env is None:
            rollout = self.config.rollout
            self._env = self._make_env(self.plan.train_kwargs, rollout.tasks_per_iteration * rollout.group_size)
        return self._env

    @property
    def eval_env(self):
        """The evaluation side's envs (the training envs when both sides are one env)."""
        if self.plan.eval_kwargs == self.plan.train_kwargs:
            return self.env
        if self._eval_env is None:
            evaluation = self.config.eval
            self._eval_env = self._make_env(self.plan.eval_kwargs, evaluation.num_tasks * evaluation.group_size)
        return self._eval_env

    # ------------------------------------------------------------------ resume
    def _restore(self) -> int:
        """Load the newest good checkpoint; return the first iteration still to run."""
        checkpoint = latest_good_checkpoint(self.output_dir / "checkpoints")
        if checkpoint is None:
            self.metrics = self._open_metrics(None)
            return 0
        state = checkpoint.state
        self.policy.load_state_dict(checkpoint.policy_state)
        self.optimizer.load_state_dict(join_optimizer_state(checkpoint.optimizer_tensors, state["optimizer"]))
        self.scheduler.load_state_dict(state["scheduler"])
        self.algorithm.load_state_dict(state.get("algorithm", {}))
        torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
        self.env_steps = int(state["env_steps"])
        self.metrics = self._open_metrics(int(state["metrics_offset"]))
        self.resumed_from = checkpoint.iteration
        return checkpoint.iteration

    def _open_metrics(self, offset: int | None) -> MetricsWriter:
        tensorboard_dir = self.output_dir / "tensorboard" if self.config.logging.tensorboard else None
        return MetricsWriter(self.output_dir / "metrics.jsonl", tensorboard_dir=tensorboard_dir, resume_offset=offset)

    def _checkpoint(self, iteration: int) -> None:
        tensors, optimizer_rest = split_optimizer_state(self.optimizer.state_dict())
        state = {
            "iteration": iteration,
            "config": configio.to_dict(self.config),
            "optimizer": optimizer_rest,
            "scheduler": self.scheduler.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "torch_rng": torch.get_rng_state().tolist(),
            "env_steps": self.env_steps,
            "metrics_offset": self.metrics.offset,
        }
        save_checkpoint(
            self.output_dir / "checkpoints",
            iteration,
            policy_state=self.policy.state_dict(),
            optimizer_tensors=tensors,
            state=state,
            keep=self.config.train.keep_checkpoints,
        )

    # ------------------------------------------------------------------ the loop
    def run(self) -> RunSummary:
        cfg = self.config
        self._setup_torch()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / "config.yaml").write_text(yaml.safe_dump(configio.to_dict(cfg), sort_keys=False))
        plan = {"summary": self.plan.summary(), "keys": self.plan.keys()}
        (self.output_dir / "task_plan.json").write_text(json.dumps(plan, indent=1))
        self._build()
        self.env_steps = 0
        self.resumed_from = None
        start = self._restore() if self.resume else 0
        if not self.resume:
            self.metrics = self._open_metrics(None)
        (self.output_dir / "audit").mkdir(exist_ok=True)
        final_eval = None
        try:
            with LiveView(f"{cfg.algo.name} on {cfg.env.id}", cfg.train.iterations, start, enabled=self.live) as view:
                if self.warm_start_metrics:
                    (self.output_dir / "warm_start.json").write_text(json.dumps(self.warm_start_metrics, indent=1))
                if start == 0 and cfg.eval.every > 0:
                    view.phase("eval")
                    final_eval = self._evaluate(0)
                for iteration in range(start, cfg.train.iterations):
                    record = self._iteration(iteration, view)
                    done = iteration + 1
                    if cfg.eval.every > 0 and (done % cfg.eval.every == 0 or done == cfg.train.iterations):
                        view.phase("eval")
                        final_eval = self._evaluate(done)
                        record.update(final_eval)
                    self.metrics.write(record)
                    view.update(done, record)
                    if done % cfg.train.checkpoint_every == 0 or done == cfg.train.iterations:
                        self._checkpoint(done)
        finally:
            self.metrics.close()
            self._close_envs()
        return RunSummary(self.output_dir, cfg.train.iterations, final_eval, self.resumed_from)

    def _collect(self, env, tasks: list[PlannedTask], group_size: int, temperature: float, seed: int):
        from orsd_gym.policies.base import SamplingParams
        from orsd_gym.rollout.collector import collect

        cfg = self.config.rollout
        sampling = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=temperature, top_p=cfg.top_p, seed=seed)
        return collect(
            env,
            self.policy,
            [task.spec for task in tasks],
            group_size=group_size,
            sampling=sampling,
            max_turns=cfg.max_turns,
            max_episode_tokens=cfg.max_episode_tokens,
            seed=seed,
            progress=False,
            **cfg.options,
        )

    def _iteration(self, iteration: int, view: LiveView) -> dict[str, Any]:
        cfg = self.config
        record: dict[str, Any] = {"iteration": iteration + 1}
        view.phase(f"rollout {iteration + 1}")
        started = time.perf_counter()
        trajectories = self._collect(
            self.env, self.plan.train[iteration], cfg.rollout.group_size, cfg.rollout.temperature, iteration_seed(cfg.train.seed, iteration, _ROLLOUT)
        )
        record["time/rollout"] = time.perf_counter() - started
        stats = rollout_stats(trajectories)
        self.env_steps += int(stats.pop("env_steps"))
        record.update({f"train/{k}": v for k, v in stats.items()})
        record["env_steps"] = self.env_steps

        view.phase(f"advantages {iteration + 1}")
        started = time.perf_counter()
        rng = np.random.default_rng(np.random.SeedSequence([cfg.train.seed, iteration, _ALGO]))
        batch = self.algorithm.prepare(trajectories, self.policy, iteration=iteration, rng=rng)
        record["time/prepare"] = time.perf_counter() - started
        record.update(_namespaced(batch.metrics, "algo"))
        self._write_audit(iteration + 1, batch)

        view.phase(f"update {iteration + 1}")
        started = time.perf_counter()
        record.update(_namespaced(self._update(batch, iteration), "loss"))
        record["time/update"] = time.perf_counter() - started
        record["lr"] = self.scheduler.get_last_lr()[0]
        return record

    def _update(self, batch, iteration: int) -> dict[str, float]:
        # Train mode (dropout, e.g. model.lora.dropout) for the update only: rollouts, scoring
        # and ORSD's replay run in eval mode.
        self.policy.set_training(True)
        try:
            return self._optimise(batch, iteration)
        finally:
            self.policy.set_training(False)

    def _optimise(self, batch, iteration: int) -> dict[str, float]:
        cfg = self.config.optim
        n = len(batch.trajectories)
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        grad_norms = []
        for epoch in range(cfg.epochs):
            # Mini-batches are a fresh permutation per (iteration, epoch), from the run's seed.
            seeds = np.random.SeedSequence([self.config.train.seed, iteration, _UPDATE, epoch])
            order = np.random.default_rng(seeds).permutation(n)
            for minibatch in np.array_split(order, min(cfg.minibatches, n)):
                minibatch = [int(i) for i in minibatch]
                self.optimizer.zero_grad(set_to_none=True)
                for micro in _micro_batches(minibatch, batch.trajectories, cfg.micro_batch_tokens):
                    loss, metrics = self.algorithm.loss(self.policy, batch, micro, minibatch_indices=minibatch)
                    loss.backward()
                    for key, value in metrics.items():
                        sums[key] = sums.get(key, 0.0) + float(value) * len(micro)
                        counts[key] = counts.get(key, 0) + len(micro)
                params = self.policy.trainable_parameters()
                norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
                grad_norms.append(float(norm))
                self.optimizer.step()
                self.scheduler.step()
        out = {key: sums[key] / counts[key] for key in sums}
        out["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        return out

    def _eval_rollouts(self, iteration: int):
        cfg = self.config
        started = time.perf_counter()
        with torch.no_grad():
            trajectories = self._collect(
                self.eval_env,
                self.plan.eval,
                cfg.eval.group_size,
                cfg.eval.temperature,
                iteration_seed(cfg.train.seed, iteration, _EVAL),
            )
        stats = rollout_stats(trajectories)
        result = {f"eval/{k}": v for k, v in stats.items() if k != "env_steps"}
        result["eval/time"] = time.perf_counter() - started
        return trajectories, result

    def _evaluate(self, iteration: int) -> dict[str, float]:
        _, result = self._eval_rollouts(iteration)
        record = {"iteration": iteration, "env_steps": self.env_steps, **result}
        with open(self.output_dir / "eval.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return result

    def _close_envs(self) -> None:
        for pool in (self._env, self._eval_env):
            for env in pool if isinstance(pool, list) else [pool] if pool is not None else []:
                env.close()
        self._env = self._eval_env = None

    def evaluate_checkpoint(self, checkpoint):
        """Held-out evaluation of a checkpoint's weights (no training state is touched)."""
        self._setup_torch()
        self.policy = self._load_policy()
        self.policy.load_state_dict(checkpoint.policy_state)  # trainable weights: warm start included
        try:
            return self._eval_rollouts(checkpoint.iteration)
        finally:
            self._close_envs()

    def _write_audit(self, iteration: int, batch) -> None:
        from orsd_gym.rollout.trajectory import save_jsonl

        directory = self.output_dir / "audit" / f"iter_{iteration:06d}"
        directory.mkdir(parents=True, exist_ok=True)
        save_jsonl(batch.trajectories, directory / "trajectories.jsonl")
        extras = {key: [t.tolist() for t in tensors] for key, tensors in batch.token_extras.items()}
        extras["advantages"] = [t.tolist() for t in batch.advantages]
        (directory / "token_extras.json").write_text(json.dumps(extras))
        (directory / "groups.json").write_text(json.dumps(batch.audit, indent=1, default=str))


def _namespaced(metrics: dict[str, float], namespace: str) -> dict[str, float]:
    """Keys without a namespace get ``namespace/`` (algorithms may also name their own, e.g. ``orsd/``)."""
    return {key if "/" in key else f"{namespace}/{key}": value for key, value in metrics.items()}


def _algorithm_class(name: str):
    from orsd_gym.algos.base import ALGORITHMS

    return ALGORITHMS[name]


def _micro_batches(indices: list[int], trajectories, token_budget: int) -> list[list[int]]:
    """Split ``indices`` into consecutive groups whose padded size (rows x longest) fits the budget."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in indices:
        length = len(trajectories[index].token_ids)
        if current and max(longest, length) * (len(current) + 1) > token_budget:
            batches.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


def _schedule(optim, total_steps: int):
    def factor(step: int) -> float:
        if optim.warmup_steps and step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        progress = min(1.0, (step - optim.warmup_steps) / max(1, total_steps - optim.warmup_steps))
        if optim.scheduler == "linear":
            return max(0.0, 1.0 - progress)
        if optim.scheduler == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return factor
