"""``orsd-gym compare``: plain GRPO vs ORSD (or any algorithms) on one env, one command.

For every seed, each algorithm trains from the same initial weights (the model is loaded with
that seed), on the same training tasks (drawn from ``(seed, iteration)`` only), with the same
environment-interaction budget (iterations x tasks x group size, same turn limits) and is
evaluated on the same held-out tasks (the task plan: `orsd_gym.train.plan`). The report
directory then gets ``report.md``, ``results.json`` and PNG learning curves (see
`orsd_gym.experiments.report`).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from orsd_gym import configio, progress
from orsd_gym.algos.base import algorithm_variants
from orsd_gym.allocator import trim_heap
from orsd_gym.errors import UsageError
from orsd_gym.experiments.baseline_runs import run_baseline
from orsd_gym.experiments.report import write_report
from orsd_gym.probes import check_probes, probes_for, run_records
from orsd_gym.train import rundir_lock
from orsd_gym.train.checkpoint import list_checkpoints
from orsd_gym.train.config import Config, resolve_algo
from orsd_gym.train.launch import train, under_torchrun
from orsd_gym.train.metrics import read_metrics
from orsd_gym.train.rundir import finished_from_records, finished_run
from orsd_gym.train.validation import validate_settings
from orsd_gym.writable import writable_directory, write_file

#: The stable-baselines3 algorithms a comparison arm can name (``sb3:<name>``).
SB3_BASELINES = ("maskable_ppo", "ppo", "dqn")


@dataclass
class RunResult:
    algo: str
    seed: int
    run_dir: Path
    #: Held-out evaluation points: iteration, env_steps, eval/* metrics.
    evals: list[dict]
    metrics: list[dict]
    #: The run's task plan (``task_plan.json``: summary and task keys).
    plan: dict


@dataclass(frozen=True)
class Arm:
    """One arm of a comparison: an algorithm (``"grpo"``, ``"orsd"``), a variant an algorithm
    declares (`Algorithm.variants`: ORSD's rubric sources ``orsd:expert``, ``orsd:shuffled``,
    ``orsd:file``), or a classic-RL baseline (``"sb3:maskable_ppo"``, ``"sb3:ppo"``,
    ``"sb3:dqn"``, ``"random"``).

    An LLM arm may set its algorithm's settings with ``@key=value`` suffixes, so one comparison
    holds a sweep: ``orsd:expert@beta=0.1`` and ``orsd:expert@beta=0.2`` train side by side on
    the same tasks from the same warm start (values are YAML scalars; keys are checked before any
    run starts)."""

    label: str
    algo: str
    params: dict[str, Any]
    #: The baseline algorithm of a classic-RL arm (None: an LLM arm the trainer runs).
    baseline: str | None = None

    @classmethod
    def parse(cls, text: str) -> Arm:
        text = text.strip()
        name, *settings = text.split("@")
        algo, _, variant = name.partition(":")
        if name == "random" or (algo == "sb3" and variant in SB3_BASELINES):
            if settings:
                raise UsageError(f"arm {text!r}: @key=value sets an LLM arm's algorithm settings, not a baseline's")
            return cls(text, algo, {}, baseline=variant or name)
        params = _arm_settings(text, settings)
        if not variant:
            return cls(text, algo, params)
        variants = algorithm_variants()
        if name not in variants:
            raise UsageError(
                f"arm {text!r}: a variant is one an algorithm declares ({', '.join(variants)}) "
                f"or a baseline (sb3:{'|'.join(SB3_BASELINES)}, random)"
            )
        return cls(text, algo, {**variants[name], **params})

    @property
    def slug(self) -> str:
        """The label as a directory name."""
        return self.label.replace(":", "-").replace("@", "-")


def _arm_settings(text: str, settings: list[str]) -> dict[str, Any]:
    """The ``key=value`` suffixes of an arm, values read as YAML scalars (``0.1`` a float); a
    dotted key sets one nested setting (``reward.no_progress_penalty=0.2``)."""
    params: dict[str, Any] = {}
    for setting in settings:
        key, equals, value = setting.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise UsageError(f"arm {text!r}: {setting!r} is not key=value (e.g. orsd:expert@beta=0.1)")
        configio.apply_override(params, setting)
    return params


def run_config(base: Config, arm: Arm, seed: int, out_dir: Path) -> Config:
    """The config of one (arm, seed) run of a comparison."""
    config = copy.deepcopy(base)
    if arm.baseline is None:
        config.algo.name = arm.algo
        config.algo.per_algo[arm.algo] = configio.merge(config.algo.per_algo.get(arm.algo, {}), arm.params)
    config.train.seed = seed
    config.train.output_dir = str(out_dir / "runs" / f"{arm.slug}-seed{seed}")
    if config.warm_start.episodes > 0 and not config.warm_start.path:
        # One warm start per seed, shared by every algorithm: same initial weights.
        config.warm_start.path = str(out_dir / "warm_start" / f"seed{seed}.safetensors")
    if config.eval.reuse_dir is None:
        # The arms of a seed evaluate the warm start they share: played once, then read back.
        config.eval.reuse_dir = str(out_dir / "evaluations")
    if arm.baseline is None:
        # Fail before any run starts if a setting is bad.
        validate_settings(config, resolve_algo(config))
        check_probes(config)
    return config


def compare(
    base: Config,
    arms: list[str],
    seeds: list[int],
    out_dir: str | Path,
    *,
    live: bool = True,
    resume: bool = True,
    allow_changes: Sequence[str] = (),
    console: Console | None = None,
) -> Path:
    """Train every (arm, seed) pair (arms: see `Arm`), then write the report; returns its path.

    With ``resume`` a run that already has a checkpoint continues (so an interrupted comparison
    restarts where it stopped), but only if it was trained with exactly these settings: a run
    of other settings is refused, naming them (`orsd_gym.train.rundir`), unless they are among
    ``allow_changes`` (settings that change how fast, not what: e.g. ``train.threads`` when a
    comparison continues on another machine); a run that never reached its first checkpoint
    starts over; a finished run kept without its checkpoints (its records: config, metrics,
    evaluations, task plan) is read, not trained again. Each run is trained as
    `orsd_gym.train.launch.train` trains it: ``train.workers=N`` runs N data-parallel Ray
    workers per run.
    """
    if under_torchrun():
        raise UsageError("compare starts its own workers: run it with train.workers=N (Ray), not under torchrun")
    out_dir = writable_directory(out_dir, "the report directory (--out)")
    console = console or Console()
    options = RunOptions(resume=resume, allow_changes=tuple(allow_changes), live=live, console=console)
    with seeds_owned(out_dir, seeds, lambda text: console.out(text, highlight=False)):
        return _compare(base, arms, seeds, out_dir, options)


@contextlib.contextmanager
def seeds_owned(out_dir: Path, seeds: Sequence[int], say: Callable[[str], None]) -> Iterator[None]:
    """This process trains ``seeds`` in ``out_dir`` alone: another comparison process sharing
    ``--out`` with one of them is refused, naming this one (`orsd_gym.train.rundir_lock`)."""
    with contextlib.ExitStack() as stack:
        for seed in seeds:
            lock = rundir_lock.acquire(out_dir / f"seed{seed}.lock", f"seed {seed} of the comparison in {out_dir}", say)
            stack.callback(rundir_lock.release, lock)
        yield


@dataclass(frozen=True)
class RunOptions:
    """How `compare` trains each of its runs (see `compare` for what each does)."""

    resume: bool
    allow_changes: Sequence[str]
    live: bool
    console: Console


def _compare(base: Config, arms: list[str], seeds: list[int], out_dir: Path, options: RunOptions) -> Path:
    """`compare`'s work, once this process owns its seeds."""
    # Per seed the LLM arms run first: a baseline gets the environment steps they used.
    parsed = sorted((Arm.parse(text) for text in arms), key=lambda arm: arm.baseline is not None)
    configs = [(arm, seed, run_config(base, arm, seed, out_dir)) for seed in seeds for arm in parsed]
    write_file(
        out_dir / "compare_config.yaml",
        json.dumps({"arms": arms, "seeds": seeds, "base": configio.to_dict(base)}, indent=1),
        "the comparison's settings",
    )
    results: list[RunResult] = []
    trained = [config.train.iterations for arm, _, config in configs if arm.baseline is None]
    with progress.budget(sum(trained)):
        for number, (arm, seed, config) in enumerate(configs, start=1):
            with progress.phase(f"run {arm.slug}-seed{seed} ({number}/{len(configs)})"):
                results.append(_run(arm, seed, config, base, options, results))
    with progress.phase("writing the report"):
        return write_report(out_dir, base, results)


def _run(arm: Arm, seed: int, config: Config, base: Config, options: RunOptions, earlier: list[RunResult]) -> RunResult:
    """Train (or read) one run of a comparison; ``earlier`` are the runs before it."""
    run_dir = Path(config.train.output_dir)
    started = time.perf_counter()
    console = options.console
    if arm.baseline is None and options.resume and _finished_without_weights(config, run_dir, options.allow_changes):
        console.print(f"{run_dir} finished before (its checkpoints are not kept): read from its records")
        progress.advance(config.train.iterations, timed=False)
    elif arm.baseline is None:
        reuse = options.resume and bool(list_checkpoints(run_dir / "checkpoints"))
        train(
            config,
            resume=reuse,
            overwrite=not reuse,
            allow_changes=options.allow_changes if reuse else (),
            live=options.live,
            console=console,
            callbacks=probes_for(config),
        )
    else:
        run_baseline(config, arm.baseline, run_dir, _env_step_budget(config, [r for r in earlier if r.seed == seed]))
    if base.train.return_freed_memory:
        # The finished run's model and optimiser may sit in reference cycles: free them and
        # return their pages before the next run allocates its own.
        gc.collect()
        trim_heap()
    result = _read_run(arm.label, seed, run_dir)
    final = result.evals[-1] if result.evals else None
    console.print(_run_line(arm.label, seed, final, time.perf_counter() - started), highlight=False)
    return result


def report_finished(
    base: Config,
    arms: list[str],
    seeds: list[int],
    out_dir: str | Path,
    *,
    allow_changes: Sequence[str] = (),
) -> tuple[Path, list[str]]:
    """Write the report of the (arm, seed) runs in ``out_dir`` that have finished, training
    nothing: the interim report of a comparison that spans sessions. Returns the report and
    the runs it leaves out (not started or not finished). A finished run of other settings is
    refused as `compare` refuses it."""
    results, left_out = finished_runs(base, arms, seeds, out_dir, allow_changes=allow_changes)
    if not results:
        raise UsageError(f"no finished run in {Path(out_dir) / 'runs'}: nothing to report")
    return write_report(out_dir, base, results), left_out


def finished_runs(
    base: Config,
    arms: list[str],
    seeds: list[int],
    out_dir: str | Path,
    *,
    allow_changes: Sequence[str] = (),
) -> tuple[list[RunResult], list[str]]:
    """The (arm, seed) runs in ``out_dir`` that have finished, read from their records, and
    the names of those that have not (not started or not finished). A finished run of other
    settings is refused as `compare` refuses it; LLM arms only (see `report_finished`)."""
    out_dir = Path(out_dir)
    parsed = [Arm.parse(text) for text in arms]
    baselines = [arm.label for arm in parsed if arm.baseline is not None]
    if baselines:
        # A baseline's budget is the environment steps its seed's LLM arms used: only a full
        # comparison knows whether a baseline on disk was trained with the right one.
        raise UsageError(f"an interim report covers LLM arms only; leave out {', '.join(baselines)}")
    results: list[RunResult] = []
    left_out: list[str] = []
    for seed in seeds:
        for arm in parsed:
            config = run_config(base, arm, seed, out_dir)
            run_dir = Path(config.train.output_dir)
            record, defaults = run_records(config)
            if finished_run(run_dir, record, allow_changes=allow_changes, defaults=defaults):
                results.append(_read_run(arm.label, seed, run_dir))
            else:
                left_out.append(f"{arm.label}-seed{seed}")
    return results, left_out


def _finished_without_weights(config: Config, run_dir: Path, allow_changes: Sequence[str]) -> bool:
    record, defaults = run_records(config)
    return finished_from_records(run_dir, record, allow_changes=allow_changes, defaults=defaults)


def _env_step_budget(config: Config, same_seed: list[RunResult]) -> int:
    """A baseline's environment steps: the most any LLM arm of its seed used (what their runs
    actually played), else the plan's upper bound (episodes x turn limit)."""
    used = [int(r.metrics[-1]["env_steps"]) for r in same_seed if r.metrics and "env_steps" in r.metrics[-1]]
    if used:
        return max(used)
    rollout = config.rollout
    return config.train.iterations * rollout.tasks_per_iteration * rollout.group_size * (rollout.max_turns or 50)


def _run_line(algo: str, seed: int, final_eval: dict[str, Any] | None, seconds: float) -> str:
    """The one line a comparison prints per finished run."""
    success = f"final eval success {final_eval['eval/success_rate']:.3f}" if final_eval else "no evaluation"
    return f"run {algo}-seed{seed} done: {success} ({seconds / 60:.1f} min)"


def _read_run(algo: str, seed: int, run_dir: Path) -> RunResult:
    evals = read_metrics(run_dir / "eval.jsonl")
    # A resumed run may have re-evaluated an iteration: keep the last record per iteration.
    by_iteration = {int(record["iteration"]): record for record in evals}
    plan = json.loads((run_dir / "task_plan.json").read_text())
    evals = [by_iteration[k] for k in sorted(by_iteration)]
    return RunResult(algo, seed, run_dir, evals, read_metrics(run_dir / "metrics.jsonl"), plan)
