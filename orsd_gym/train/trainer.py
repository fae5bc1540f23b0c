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
from orsd_gym.policies.models import load_policy
from orsd_gym.profiling import phase
from orsd_gym.rollout.collector import PromptEdit, collect
from orsd_gym.rollout.stats import rollout_stats
from orsd_gym.rollout.trajectory import Trajectory
from orsd_gym.train.callbacks import (
    RunContext,
    TrainerCallback,
    check_sections,
    demonstration_edit,
    settings_record,
)
from orsd_gym.train.checkpoint import (
    intact_note,
    join_optimizer_state,
    latest_good_checkpoint,
    save_checkpoint,
    split_optimizer_state,
)
from orsd_gym.train.config import Config, default_record, resolve_algo, run_record
from orsd_gym.train.console import LiveView
from orsd_gym.train.envs import close_envs, make_envs
from orsd_gym.train.evaluate import evaluate
from orsd_gym.train.frozen import frozen_models
from orsd_gym.train.metrics import MetricsWriter, combine_worker_metrics
from orsd_gym.train.plan import build_task_plan
from orsd_gym.train.records import append_line, namespaced, write_audit
from orsd_gym.train.rundir import Claim, open_run_directory, release_run_directory
from orsd_gym.train.seeds import ALGO, EVAL, ROLLOUT, iteration_rng, iteration_seed
from orsd_gym.train.update import (
    UpdateStep,
    activation_budget,
    apply_optim_settings,
    check_trainable_precision,
    has_model_tokens,
    make_optimizer,
    memory_left,
    skip_update,
    update_policy,
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
        if config.train.threads:
            torch.set_num_threads(config.train.threads)
        if config.train.return_freed_memory:
            return_freed_memory()
        if config.train.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)

        model = config.model
        device = workers.device(model.device)
        self.policy = load_policy(
            model.name,
            device=device,
            dtype=model.dtype,
            lora=model.lora.settings(),
            seed=config.train.seed,
            token_budget=config.optim.micro_batch_tokens,
            gradient_checkpointing=model.gradient_checkpointing,
            inference_dtype=model.inference_dtype,
            update_dtype=model.update_dtype,
        )
        check_trainable_precision(self.policy)
        self.warm_start_metrics = workers.on_main(self._start_weights)
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

        self.env_steps = 0
        self.resumed_from: int | None = None
        self.metrics: MetricsWriter | None = None
        self._envs = None
        self._eval_envs = None
        self.run_context = RunContext(
            config=config,
            algo_settings=self.algo_config,
            policy=self.policy,
            algorithm=self.algorithm,
            workers=workers,
            training_envs=lambda: self.envs,
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
            allow_changes=allow_changes,
            say=lambda text: self.console.out(text, highlight=False),  # unwrapped: paths stay whole
        )

    def _release_run_directory(self) -> None:
        if self.workers.is_main:
            release_run_directory(self.output_dir)

    def _start_weights(self) -> dict[str, float] | None:
        """Start from ``model.init_weights`` and/or a (cached) behaviour-cloning warm start."""
        cfg = self.config
        if cfg.model.init_weights:
            path = Path(cfg.model.init_weights)
            if not path.is_file():
                raise FileNotFoundError(f"model.init_weights={str(path)!r} does not exist")
            self.policy.load_state_dict(load_file(path))
        if cfg.warm_start.episodes > 0:
            path = Path(cfg.warm_start.path) if cfg.warm_start.path else self.output_dir / "warm_start.safetensors"
            edit = demonstration_edit(self.callbacks, cfg, len(self.plan.warm_start))
            return ensure_warm_start(cfg, self.plan, self.policy, path, edit)
        return None

    # ------------------------------------------------------------------ envs
    @property
    def envs(self):
        """The training side's envs (enough for this worker's share of an iteration's groups)."""
        if self._envs is None:
            rollout = self.config.rollout
            episodes = self.workers.most(rollout.tasks_per_iteration) * rollout.group_size
            self._envs = make_envs(self.config.env, self.plan.train_kwargs, self.config.env.num_envs or episodes)
        return self._envs

    @property
    def eval_envs(self):
        """The evaluation side's envs (the training envs when both sides are one env)."""
        if self.plan.eval_kwargs == self.plan.train_kwargs:
            return self.envs
        if self._eval_envs is None:
            episodes = max(1, self.workers.most(self.config.eval.num_tasks)) * self.config.eval.group_size
            self._eval_envs = make_envs(self.config.env, self.plan.eval_kwargs, self.config.env.num_envs or episodes)
        return self._eval_envs

    def _close_envs(self) -> None:
        close_envs(self._envs)
        close_envs(self._eval_envs)
        self._envs = self._eval_envs = None

    # ------------------------------------------------------------------ resume and checkpoints
    def _restore(self) -> int:
        """Load the newest good checkpoint (worker 0 reads it, every worker loads it); return the
        first iteration still to run."""
        checkpoint = self.workers.on_main(lambda: latest_good_checkpoint(self.output_dir / "checkpoints"))
        if checkpoint is None:
            if self.workers.is_main:
                self.metrics = self._open_metrics(None)
            return 0
        state = checkpoint.state
        self.policy.load_state_dict(checkpoint.policy_state)
        self.optimizer.load_state_dict(join_optimizer_state(checkpoint.optimizer_tensors, state["optimizer"]))
        self.scheduler.load_state_dict(state["scheduler"])
        apply_optim_settings(self.optimizer, self.scheduler, self.config.optim)
        self.algorithm.load_state_dict(state.get("algorithm", {}))
        rng = state.get("worker_torch_rng", [state["torch_rng"]])[self.workers.rank]
        torch.set_rng_state(torch.tensor(rng, dtype=torch.uint8))
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
        if not self.workers.is_main:
            return
        tensors, optimizer_rest = split_optimizer_state(self.optimizer.state_dict())
        state = {
            "iteration": iteration,
            "config": configio.to_dict(self.config),
            "optimizer": optimizer_rest,
            "scheduler": self.scheduler.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "torch_rng": rngs[0],
            "env_steps": self.env_steps,
            "metrics_offset": self.metrics.offset,
        }
        if self.workers.size > 1:
            state["worker_torch_rng"] = rngs
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
            self.console.print(self._resume_message(start), highlight=False)
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
            self._close_envs()
        if not main:
            return RunSummary(self.output_dir, cfg.train.iterations, None, self.resumed_from, self.workers.rank)
        return RunSummary(self.output_dir, cfg.train.iterations, final_eval or self._last_eval(), self.resumed_from)

    def _resume_message(self, start: int) -> str:
        changes = ", ".join(f"{c['key']} {c['old']!r} -> {c['new']!r}" for c in self.claim.changes)
        where = f"resumed {self.output_dir} at iteration {start} of {self.config.train.iterations}"
        if start >= self.config.train.iterations:
            where = (
                f"{self.output_dir} already finished all {self.config.train.iterations} iterations; nothing to train"
            )
        return where + (f" (allowed changes: {changes})" if changes else "")

    def _last_eval(self) -> dict[str, float] | None:
        """The latest evaluation the run recorded (what a finished run reports when resumed)."""
        path = self.output_dir / "eval.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        if not lines:
            return None
        return {k: v for k, v in json.loads(lines[-1]).items() if k.startswith("eval/")}

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
                self.envs,
                self.policy,
                [groups[g].spec for g in mine],
                group_size=cfg.rollout.group_size,
                sampling=cfg.rollout.sampling(cfg.rollout.temperature, rollout_seed),
                options=cfg.rollout,
                seed=rollout_seed,
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
            # Decided together: every worker takes part in an update's all-reduces, or none does.
            # A batch without a model token has no loss to differentiate, whatever the algorithm
            # (and a worker without one could not take part in the others' all-reduces).
            tokens = all(workers.all_gather(has_model_tokens(batch)))
            if tokens and any(workers.all_gather(self.algorithm.has_learning_signal(batch))):
                losses = update_policy(
                    self.policy,
                    self.algorithm,
                    batch,
                    self.optimizer,
                    self.scheduler,
                    cfg.optim,
                    UpdateStep(seed, iteration, workers),
                    lambda: self._before_update(batch, iteration),
                ) | {"skipped": 0.0, "no_model_tokens": 0.0}
            else:
                losses = skip_update(self.scheduler, cfg.optim, len(batch.trajectories), no_model_tokens=not tokens)
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
            records.append((callback.section, record))
        self._release_freed_memory()
        if not self.workers.is_main:
            return result
        append_line(self.output_dir / "eval.jsonl", {"iteration": iteration, "env_steps": self.env_steps, **result})
        for section, record in records:
            if record:
                append_line(self.output_dir / f"{section}.jsonl", {"iteration": iteration, **record})
        return result

    def _play_evaluation(self, seed: int, edit: PromptEdit | None) -> tuple[list[Trajectory], dict[str, float]]:
        return evaluate(self.policy, self.eval_envs, self.plan, self.config, seed, self.workers, edit)

    def _release_freed_memory(self) -> None:
        """Hand the heap's free pages back between phases (`orsd_gym.allocator.trim_heap`)."""
        if self.config.train.return_freed_memory:
            trim_heap()
