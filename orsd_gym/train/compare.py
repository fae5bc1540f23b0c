"""``orsd-gym compare``: plain GRPO vs ORSD (or any algorithms) on one env, one command.

For every seed, each algorithm trains from the same initial weights (the model is loaded with
that seed), on the same training tasks (drawn from ``(seed, iteration)`` only), with the same
environment-interaction budget (iterations x tasks x group size, same turn limits) and is
evaluated on the same held-out tasks (the task plan: `orsd_gym.train.plan`). The report
directory then gets ``report.md``, ``results.json`` and PNG learning curves (see
`orsd_gym.train.report`).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from orsd_gym import configio
from orsd_gym.errors import UsageError
from orsd_gym.train.checkpoint import list_checkpoints
from orsd_gym.train.config import Config, resolve_algo
from orsd_gym.train.launch import train, under_torchrun
from orsd_gym.train.metrics import read_metrics
from orsd_gym.train.report import write_report
from orsd_gym.train.validation import validate_settings


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


def run_config(base: Config, algo: str, seed: int, out_dir: Path) -> Config:
    """The config of one (algorithm, seed) run of a comparison."""
    config = copy.deepcopy(base)
    config.algo.name = algo
    config.train.seed = seed
    config.train.output_dir = str(out_dir / "runs" / f"{algo}-seed{seed}")
    if config.warm_start.episodes > 0 and not config.warm_start.path:
        # One warm start per seed, shared by every algorithm: same initial weights.
        config.warm_start.path = str(out_dir / "warm_start" / f"seed{seed}.safetensors")
    resolve_algo(config)  # fail before any run starts if one algorithm's settings are bad
    validate_settings(config)
    return config


def compare(
    base: Config,
    algos: list[str],
    seeds: list[int],
    out_dir: str | Path,
    *,
    live: bool = True,
    resume: bool = True,
    console: Console | None = None,
) -> Path:
    """Train every (algorithm, seed) pair, then write the report; returns the report path.

    With ``resume`` a run that already has a checkpoint continues (so an interrupted comparison
    restarts where it stopped), but only if it was trained with exactly these settings: a run
    of other settings is refused, naming them (`orsd_gym.train.rundir`); a run that never
    reached its first checkpoint starts over. Each run is trained as `orsd_gym.train.launch.train`
    trains it: ``train.workers=N`` runs N data-parallel Ray workers per run.
    """
    if under_torchrun():
        raise UsageError("compare starts its own workers: run it with train.workers=N (Ray), not under torchrun")
    out_dir = Path(out_dir)
    console = console or Console()
    configs = [(algo, seed, run_config(base, algo, seed, out_dir)) for seed in seeds for algo in algos]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compare_config.yaml").write_text(
        json.dumps({"algos": algos, "seeds": seeds, "base": configio.to_dict(base)}, indent=1)
    )
    results = []
    for algo, seed, config in configs:
        run_dir = Path(config.train.output_dir)
        started = time.perf_counter()
        reuse = resume and bool(list_checkpoints(run_dir / "checkpoints"))
        summary = train(config, resume=reuse, overwrite=not reuse, live=live, console=console)
        results.append(_read_run(algo, seed, run_dir))
        console.print(_run_line(algo, seed, summary.final_eval, time.perf_counter() - started), highlight=False)
    return write_report(out_dir, base, results)


def _run_line(algo: str, seed: int, final_eval: dict[str, float] | None, seconds: float) -> str:
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
