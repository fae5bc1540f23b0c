"""The training loop: plan -> rollouts (groups) -> advantages -> update -> eval -> log.

Which tasks are trained on, evaluated on and cloned from is the run's task plan
(`orsd_gym.train.plan`: evaluation held out by construction), written to ``task_plan.json``.
Everything else an iteration depends on comes from ``(train.seed, iteration)``
(`orsd_gym.train.seeds`): the sampling noise of the rollouts, the algorithm's own randomness,
the mini-batch order. A resumed run therefore replays exactly what the uninterrupted run would
have done, and two algorithms run with the same seed see the same training tasks and the same
held-out evaluation tasks.

The same trainer runs in every worker of a data-parallel run (`orsd_gym.train.workers`): each
plays its share of the iteration's task groups and of the evaluation tasks, and worker 0
alone touches the run directory, from what the others send it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from safetensors.torch import load_file

from orsd_gym import configio, progress
from orsd_gym.algos.base import PreparedBatch, make_algorithm
from orsd_gym.allocator import return_freed_memory, trim_heap
from orsd_gym.errors import ConfigError, DiskWriteError
from orsd_gym.policies.base import Policy
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.profiling import phase
from orsd_gym.rollout.collector import PromptEdit, collect
from orsd_gym.rollout.stats import rollout_stats
from orsd_gym.rollout.trajectory import Trajectory
from orsd_gym.train.callbacks import (
    RunContext,
    TrainerCallback,
    check_sections,
    demonstration_edit,
    safe_changes,
    settings_record,
)
from orsd_gym.train.checkpoint import (
    intact_note,
    latest_good_checkpoint,
)
from orsd_gym.train.config import Config, TrainConfig, default_record, resolve_algo, run_record
from orsd_gym.train.console import LiveView
from orsd_gym.train.envs import RunEnvs
from orsd_gym.train.eval_reuse import evaluate_or_reuse
from orsd_gym.train.frozen import frozen_models
from orsd_gym.train.metrics import MetricsWriter, combine_worker_metrics
from orsd_gym.train.plan import TaskPlan, build_task_plan
from orsd_gym.train.records import append_line, namespaced, write_audit
from orsd_gym.train.rundir import (
    SAFE_CHANGES,
    Claim,
    last_evaluation,
    open_run_directory,
    release_run_directory,
    resume_message,
)
from orsd_gym.train.seeds import ALGO, EVAL, ROLLOUT, iteration_rng, iteration_seed
from orsd_gym.train.training_state import TrainingState
from orsd_gym.train.update import (
    UpdateStep,
    activation_budget,
    check_trainable_precision,
    make_optimizer,
    memory_left,
    update_or_skip,
)
from orsd_gym.train.warm_start import ensure_warm_start
from orsd_gym.train.workers import SINGLE, Workers
from orsd_gym.writable import write_file


@dataclass
class RunSummary:
    output_dir: Path
    iterations_done: int
    final_eval: dict[str, float] | None
    resumed_from: int | None
    #: The data-parallel worker whose summary this is (only worker 0's has the evaluation).
    worker: int = 0


class Trainer:
    """One training run of a `Config`. Construction makes everything the run needs, in order:
    the task plan and the run directory's claim (both checked before anything is written or
    loaded), the run's record (config.yaml, task_plan.json), the policy (warm-started), the
    frozen models the algorithm asks for, the algorithm, the optimiser and its schedule; `run`
    trains.

    ``resume`` continues the run in ``train.output_dir`` (refused when its settings differ from
    this config's, except ``allow_changes``: see `orsd_gym.train.rundir`); ``overwrite`` replaces
    a run already there. ``workers`` is this process's place in a data-parallel run of
    ``train.workers`` workers (`orsd_gym.train.launch` starts them); only worker 0 prints.
    From the claim until `run` ends, the run directory is this process's: another process
    training into it is refused (`orsd_gym.train.rundir_lock`).

    ``callbacks`` are the run's probes (`orsd_gym.train.callbacks`; the built-in ones:
    `orsd_gym.probes.probes_for`): each checks the config before anything is written, and the
    trainer calls them at fixed points of every iteration and evaluation.
    """

    def __init__(
        self,
        config: Config,
        *,
        resume: bool = False,
        overwrite: bool = False,
        allow_changes: Sequence[str] = (),
        live: bool | None = None,
        console: Console | None = None,
        workers: Workers = SINGLE,
        callbacks: Sequence[TrainerCallback] = (),
    ) -> None:
        if workers.size != config.train.workers:
            raise ConfigError(
                f"train.workers={config.train.workers} but this process is one of {workers.size}: start the "
                "workers with `orsd-gym train` (orsd_gym.train.launch.train) or torchrun"
            )
        self.config = config
        self.workers = workers
        self.algo_config = resolve_algo(config)
        self.callbacks = list(callbacks)
        check_sections(config.probes, self.callbacks)
        for callback in self.callbacks:
            callback.check_config(config, self.algo_config)
        self.plan = build_task_plan(config)
        self.output_dir = Path(config.train.output_dir)
        self.resume = resume
        main = workers.is_main
        self.live = (config.logging.live if live is None else live) and main
        self.console = (console or Console()) if main else Console(quiet=True)
        self.claim = workers.on_main(lambda: self._claim(resume, overwrite, allow_changes))
        try:
            with progress.phase("setting up"):
                self._build()
        except BaseException:
            self._release_run_directory()  # nothing will run in it: another process may
            raise

    def _build(self) -> None:
        """Everything after the claim: the policy (warm-started), frozen models, algorithm, optimiser."""
        config, workers = self.config, self.workers
        for warning in self.plan.warnings:
            self.console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
        set_up_process(config.train)
        model = config.model
        device = workers.device(model.device)
        self.policy = load_run_policy(config, device)
        self.warm_start_metrics = workers.on_main(
            lambda: start_weights(config, self.plan, self.policy, self.output_dir, self.callbacks)
        )
        self._release_freed_memory()  # the warm start's gradients and AdamW moments
        # Every replica starts from worker 0's weights (its warm start), as DDP's do.
        workers.broadcast_parameters(self.policy.trainable_parameters())
        reference, verifier = frozen_models(self.policy, model, self.algo_config, device)
        self.algorithm = make_algorithm(config.algo.name, self.algo_config, reference=reference, verifier=verifier)
        activation_budget(self.policy, self.algorithm, config.optim)  # a budget too small fails here
        # Rollouts, evaluations and ORSD's proposals generate in row chunks within the same budget.
        self.policy.generation_budget = memory_left(self.policy, self.algorithm, config.optim)
        steps = config.train.iterations * config.optim.epochs * config.optim.minibatches
        self.optimizer, self.scheduler = make_optimizer(self.policy, config.optim, steps)
        self.state = TrainingState(self.policy, self.optimizer, self.scheduler, self.algorithm)

        self.env_steps = 0
        self.resumed_from: int | None = None
        self.metrics: MetricsWriter | None = None
        self.envs = RunEnvs(config, self.plan, workers)
        self.run_context = RunContext(
            config=config,
            algo_settings=self.algo_config,
            policy=self.policy,
            algorithm=self.algorithm,
            workers=workers,
            training_envs=lambda: self.envs.train,
            evaluate=lambda seed, edit: self._play_evaluation(seed, edit)[0],
        )

    def _claim(self, resume: bool, overwrite: bool, allow_changes: Sequence[str]) -> Claim:
        """Check the run directory, then write the run's record there (worker 0 only)."""
        return open_run_directory(
            self.output_dir,
            run_record(self.config, settings_record(self.callbacks), self.algo_config),
            default_record(self.config.algo.name, settings_record(self.callbacks, defaults=True)),
            {"summary": self.plan.summary(), "keys": self.plan.keys()},
            resume=resume,
            overwrite=overwrite,
            changes=(allow_changes, SAFE_CHANGES | safe_changes(self.callbacks)),
            say=lambda text: self.console.out(text, highlight=False),  # unwrapped: paths stay whole
        )

    def _release_run_directory(self) -> None:
        if self.workers.is_main:
            release_run_directory(self.output_dir)

    # ------------------------------------------------------------------ resume and checkpoints
    def _restore(self) -> int:
        """Load the newest good checkpoint (worker 0 reads it, every worker loads it); return the
        first iteration still to run."""
        checkpoint = self.workers.on_main(lambda: latest_good_checkpoint(self.output_dir / "checkpoints"))
        if checkpoint is None:
            if self.workers.is_main:
                self.metrics = self._open_metrics(None)
            return 0
        state = self.state.restore(checkpoint, self.config.optim, self.workers.rank)
        self.env_steps = int(state["env_steps"])
        if self.workers.is_main:
            self.metrics = self._open_metrics(int(state["metrics_offset"]))
        self.resumed_from = checkpoint.iteration
        return checkpoint.iteration

    def _open_metrics(self, offset: int | None) -> MetricsWriter:
        tensorboard_dir = self.output_dir / "tensorboard" if self.config.logging.tensorboard else None
        return MetricsWriter(self.output_dir / "metrics.jsonl", tensorboard_dir=tensorboard_dir, resume_offset=offset)

    def _checkpoint(self, iteration: int) -> None:
        """Worker 0 writes the checkpoint; the replicas are identical but for their RNG states."""
        rngs = self.workers.gather(torch.get_rng_state().tolist())
        if self.workers.is_main:
            run = {"config": configio.to_dict(self.config), "env_steps": self.env_steps}
            run["metrics_offset"] = self.metrics.offset
            self.state.save(self.output_dir / "checkpoints", iteration, rngs, run, self.config.train.keep_checkpoints)

    # ------------------------------------------------------------------ the loop
    def run(self) -> RunSummary:
        """Train; worker 0's summary says how the run ended (the others' has no evaluation).
        However it ends, the run directory is free for another process afterwards."""
        try:
            return self._train()
        finally:
            self._release_run_directory()

    def _train(self) -> RunSummary:
        cfg = self.config
        main = self.workers.is_main
        start = self._restore() if self.resume else 0
        if self.resume:
            message = resume_message(self.output_dir, start, self.config.train.iterations, self.claim.changes)
            self.console.print(message, highlight=False)
        if self.metrics is None and main:
            self.metrics = self._open_metrics(None)
            (self.output_dir / "audit").mkdir(exist_ok=True)
        final_eval = None
        title = f"{cfg.algo.name} on {cfg.env.id}"
        try:
            with LiveView(title, cfg.train.iterations, start, enabled=self.live, console=self.console) as view:
                if self.warm_start_metrics and main:
                    write_file(
                        self.output_dir / "warm_start.json",
                        json.dumps(self.warm_start_metrics, indent=1),
                        "the warm start's metrics",
                    )
                if start == 0 and cfg.eval.every > 0:
                    view.phase("eval")
                    final_eval = self._evaluate(0)
                for iteration in range(start, cfg.train.iterations):
                    started = time.perf_counter()
                    record = self._iteration(iteration, view)
                    done = iteration + 1
                    if cfg.eval.every > 0 and (done % cfg.eval.every == 0 or done == cfg.train.iterations):
                        view.phase("eval")
                        final_eval = self._evaluate(done)
                        record.update(final_eval)
                    record["time/iteration"] = time.perf_counter() - started  # rollout to evaluation
                    if main:
                        self.metrics.write(record)
                        view.update(done, record)
                    if done % cfg.train.checkpoint_every == 0 or done == cfg.train.iterations:
                        with phase("checkpoint"):
                            self._checkpoint(done)
        except DiskWriteError as error:
            # Whatever write it was (a record, an audit, a checkpoint), the run stands at its
            # last good checkpoint.
            error.intact = error.intact or intact_note(self.output_dir / "checkpoints")
            raise
        finally:
            if self.metrics is not None:
                self.metrics.close()
            self.envs.close()
        if not main:
            return RunSummary(self.output_dir, cfg.train.iterations, None, self.resumed_from, self.workers.rank)
        return RunSummary(
            self.output_dir, cfg.train.iterations, final_eval or last_evaluation(self.output_dir), self.resumed_from
        )

    def _iteration(self, iteration: int, view: LiveView) -> dict[str, Any]:
        """One iteration of this worker; the record to log (worker 0's; the others' is partial)."""
        cfg = self.config
        seed = cfg.train.seed
        workers = self.workers
        record: dict[str, Any] = {"iteration": iteration + 1}

        view.phase(f"rollout {iteration + 1}")
        rollout_seed = iteration_seed(seed, iteration, ROLLOUT)
        groups = self.plan.train[iteration]
        mine = workers.share(len(groups))
        with phase("rollout") as timer:
            trajectories = collect(
                self.envs.train,
                self.policy,
                [groups[g].spec for g in mine],
                group_size=cfg.rollout.group_size,
                sampling=cfg.rollout.sampling(cfg.rollout.temperature, rollout_seed),
                options=cfg.rollout,
                first_group=mine.start,
            )
        record["time/rollout"] = timer.seconds

        view.phase(f"advantages {iteration + 1}")
        with phase("prepare") as timer:
            rng = iteration_rng(seed, iteration, ALGO, *workers.stream())
            batch = self.algorithm.prepare(trajectories, self.policy, iteration=iteration, rng=rng, peers=workers)
            if workers.size > 1:  # e.g. ORSD's offline rubrics: every worker learns what any wrote
                self.algorithm.load_state_dict(
                    self.algorithm.merge_worker_states(workers.all_gather(self.algorithm.state_dict()))
                )
        record["time/prepare"] = timer.seconds
        self._release_freed_memory()  # before the update, the iteration's peak
        parts = workers.gather((batch, len(mine)))
        if parts is not None:
            batches = [part for part, _ in parts]
            stats = rollout_stats([t for part in batches for t in part.trajectories])
            self.env_steps += int(stats.pop("env_steps"))
            record.update({f"train/{k}": v for k, v in stats.items()})
            record["env_steps"] = self.env_steps
            metrics = combine_worker_metrics([(part.metrics, n) for part, n in parts], self.algorithm.summed_metrics)
            record.update(namespaced(metrics, "algo"))
            write_audit(self.output_dir / "audit" / f"iter_{iteration + 1:06d}", batches)
        for callback in self.callbacks:
            record.update(callback.after_prepare(self.run_context, batch, iteration))

        view.phase(f"update {iteration + 1}")
        with phase("update") as timer:
            losses = update_or_skip(
                self.policy,
                self.algorithm,
                batch,
                (self.optimizer, self.scheduler),
                cfg.optim,
                UpdateStep(seed, iteration, workers),
                lambda: self._before_update(batch, iteration),
            )
        self._release_freed_memory()  # the update's gradients and activations
        record.update(namespaced(losses, "loss"))
        record["time/update"] = timer.seconds
        record["lr"] = self.scheduler.get_last_lr()[0]
        return record

    def _before_update(self, batch: PreparedBatch, iteration: int) -> dict[str, float]:
        measured: dict[str, float] = {}
        for callback in self.callbacks:
            measured.update(callback.before_update(self.run_context, batch, iteration))
        return measured

    def _evaluate(self, iteration: int) -> dict[str, float]:
        """Evaluate (each worker its share of the tasks), then the probes; worker 0 records and
        returns the result (``eval.jsonl``, and each probe's record in ``<section>.jsonl``)."""
        seed = iteration_seed(self.config.train.seed, iteration, EVAL)
        with phase("eval"):
            baseline, result = self._play_evaluation(seed, None)
        records = []
        for callback in self.callbacks:
            found, record = callback.after_evaluation(self.run_context, baseline, iteration)
            result.update(found)
            records.append((callback.section or type(callback).__name__, record))
        self._release_freed_memory()
        if not self.workers.is_main:
            return result
        append_line(self.output_dir / "eval.jsonl", {"iteration": iteration, "env_steps": self.env_steps, **result})
        for section, record in records:
            if record:
                append_line(self.output_dir / f"{section}.jsonl", {"iteration": iteration, **record})
        return result

    def _play_evaluation(self, seed: int, edit: PromptEdit | None) -> tuple[list[Trajectory], dict[str, float]]:
        return evaluate_or_reuse(self.policy, self.envs.eval, self.plan, self.config, seed, self.workers, edit)

    def _release_freed_memory(self) -> None:
        """Hand the heap's free pages back between phases (`orsd_gym.allocator.trim_heap`)."""
        if self.config.train.return_freed_memory:
            trim_heap()


def set_up_process(train: TrainConfig) -> None:
    """This process's torch threads, memory return and deterministic kernels, as ``train`` says."""
    if train.threads:
        torch.set_num_threads(train.threads)
    if train.return_freed_memory:
        return_freed_memory()
    if train.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def load_run_policy(config: Config, device: str) -> Policy:
    """The policy ``config.model`` describes, on ``device``, with trainable weights it can update."""
    model = config.model
    policy = load_policy(
        model.name,
        device=device,
        dtype=model.dtype,
        lora=model.lora.settings(),
        inference_dtype=model.inference_dtype,
        update_dtype=model.update_dtype,
        settings=PolicySettings(
            seed=config.train.seed,
            token_budget=config.optim.micro_batch_tokens,
            gradient_checkpointing=model.gradient_checkpointing,
        ),
    )
    check_trainable_precision(policy)
    return policy


def start_weights(
    config: Config, plan: TaskPlan, policy: Policy, output_dir: Path, callbacks: Sequence[TrainerCallback]
) -> dict[str, float] | None:
    """Start from ``model.init_weights`` and/or a (cached) behaviour-cloning warm start whose
    demonstrations the probes may edit; returns the warm start's metrics (None: none)."""
    if config.model.init_weights:
        path = Path(config.model.init_weights)
        if not path.is_file():
            raise FileNotFoundError(f"model.init_weights={str(path)!r} does not exist")
        policy.load_state_dict(load_file(path))
    if config.warm_start.episodes > 0:
        path = Path(config.warm_start.path) if config.warm_start.path else output_dir / "warm_start.safetensors"
        edit = demonstration_edit(callbacks, config, len(plan.warm_start))
        return ensure_warm_start(config, plan, policy, path, edit)
    return None
