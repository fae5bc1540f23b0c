"""A run directory records the settings that produced it and is never silently reused with others.

Before a run writes anything, `claim_run_directory` checks the directory against the request:

* a directory with no checkpoint and no measured record (metrics, evaluations) holds nothing a
  run would lose (one stopped before its first iteration, by a wrong model name or Ctrl-C): any
  command starts it over, whatever its settings, and says so; files of other tools (a lock)
  are not a run's and stay;
* a fresh run into a directory that already holds a run is refused unless told to overwrite
  (which first removes the old run's files, so no record mixes two runs);
* a run whose records reach its last iteration is finished even when its checkpoints are gone
  (they are large, so a comparison may be kept, committed or moved without them): it is never
  taken for a run stopped early and started over, and `finished_from_records` lets a
  comparison read it instead of training it again;
* ``--resume`` needs a run with a checkpoint to resume ("nothing to resume" otherwise), and
  refuses any setting that differs from the run's saved ``config.yaml`` (naming each key and
  both values), except the safe ones the caller allows explicitly (`SAFE_CHANGES`: more
  iterations, checkpoint and evaluation cadence, threads, where and how many envs run);
  ``train.workers`` is not one of them (ORSD's own sampling draws one stream per worker), so a
  data-parallel run resumes with the number of workers it started with (a setting the saved
  record lacks because it was added to the package later counts as its default); allowed changes are appended to
  ``changes.jsonl`` so the run still says what trained it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orsd_gym import configio
from orsd_gym.errors import RunDirectoryError
from orsd_gym.train import rundir_lock
from orsd_gym.train.checkpoint import list_checkpoints, remove_stale_temporaries
from orsd_gym.train.config import Config
from orsd_gym.train.metrics import read_metrics
from orsd_gym.writable import append_text, writable_directory, write_file

#: What a run writes into its directory (anything else there is left alone).
RUN_FILES = (
    "config.yaml",
    "task_plan.json",
    "metrics.jsonl",
    "eval.jsonl",
    "teacher.jsonl",
    "warm_start.json",
    "warm_start.safetensors",
    "changes.jsonl",
    "checkpoints",
    "audit",
    "tensorboard",
)
#: Settings that may change between a run and its resumption, with the caller's explicit
#: consent: they change when or how fast things happen, or how much memory it takes (a run
#: moved to a smaller machine), not what is trained.
SAFE_CHANGES = frozenset(
    {
        "optim.max_memory_gb",
        "optim.micro_batch_tokens",
        "train.iterations",
        "train.checkpoint_every",
        "train.keep_checkpoints",
        "train.threads",
        "eval.every",
        "env.num_envs",
        "env.vectorization",
        "env.backend",
        "env.envs_per_actor",
        "env.cpus_per_actor",
        "train.cpus_per_worker",
    }
)
#: Settings that never matter for a resumption: how progress is shown, where the run
#: directory is (a run moved or copied elsewhere resumes where it is), where its warm-start
#: file is (a resumed run starts from its checkpoint; what the warm start was made of is in the
#: other ``warm_start`` settings, which are compared; a comparison moved elsewhere keeps it in
#: its new directory), which Ray cluster runs it and where recorded evaluations are reused from
#: (a reused evaluation is the one the run would play).
IGNORED = frozenset(
    {"logging.live", "logging.tensorboard", "train.output_dir", "warm_start.path", "ray.address", "eval.reuse_dir"}
)


@dataclass
class Claim:
    """What `claim_run_directory` found: where a resumed run stands and the allowed changes."""

    resume_from: int | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)
    #: Why the directory is started over (empty: it is not): it held nothing a run would lose
    #: (no checkpoint, no metrics), or this run (same settings) stopped before its first checkpoint.
    restarted: str = ""


def claim_run_directory(
    output_dir: str | Path,
    record: Mapping[str, Any],
    *,
    resume: bool,
    overwrite: bool = False,
    allow_changes: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
    safe: frozenset[str] = SAFE_CHANGES,
) -> Claim:
    """Check ``output_dir`` for a run of ``record`` (the run's `run_record`) before anything is
    written; raises `RunDirectoryError` with what to do when the directory cannot be used.
    ``defaults`` (a `run_record` of the default config) stands in for settings a run saved
    before they existed; ``allow_changes`` may name settings of ``safe`` only (`SAFE_CHANGES`
    and the run's probes' measurement settings)."""
    root = Path(output_dir)
    existing = [name for name in RUN_FILES if (root / name).exists()]
    checkpoints = list_checkpoints(root / "checkpoints")
    if existing and not checkpoints and not _has_records(root):
        # A run that stopped before its first iteration ended (a wrong model name, Ctrl-C
        # during the warm start): whatever its settings, and whether the command resumes or
        # overwrites, nothing trained or measured is lost by starting over.
        _remove(root, existing)
        return Claim(restarted="it holds no checkpoint and no metrics (a run that stopped before its first iteration)")
    if existing and not checkpoints and not overwrite and _records_finished(root):
        raise RunDirectoryError(
            f"{root} holds a finished run whose checkpoints are gone (its records reach its last "
            "iteration): there is nothing to resume; --overwrite trains it again, or choose another "
            "train.output_dir"
        )
    if existing and not checkpoints and not overwrite and _same_run(root, record, defaults):
        # This run, stopped before its first checkpoint (a crash, Ctrl-C, a full disk): nothing
        # trained is lost by starting it over, with or without --resume.
        _remove(root, existing)
        return Claim(restarted="it holds this run stopped before its first checkpoint")
    if not resume:
        if existing and not overwrite:
            raise RunDirectoryError(
                f"{root} already holds a run ({', '.join(existing)}); resume it with --resume, "
                "or start over with --overwrite (deletes that run), or choose another train.output_dir"
            )
        _remove(root, existing)
        return Claim()
    if not checkpoints:
        raise RunDirectoryError(
            f"nothing to resume: {root} has no checkpoint; run without --resume to start a new run there"
        )
    saved_path = root / "config.yaml"
    if not saved_path.is_file():
        raise RunDirectoryError(f"{root} has checkpoints but no config.yaml: it cannot show what it was trained with")
    saved = yaml.safe_load(saved_path.read_text(encoding="utf-8"))
    differences = config_differences(saved, record, defaults)
    allowed = set(allow_changes)
    unknown = allowed - safe
    if unknown:
        raise RunDirectoryError(
            f"--allow-change {', '.join(sorted(unknown))}: only these settings may change on resume: "
            f"{', '.join(sorted(safe))}"
        )
    refused = {k: v for k, v in differences.items() if k not in allowed}
    if refused:
        raise RunDirectoryError(
            f"--resume would train {root} with other settings than it has: {_refusal(refused, safe)}"
        )
    if "train.iterations" in differences and record["optim"]["scheduler"] != "constant":
        raise RunDirectoryError(
            f"train.iterations cannot change on resume with optim.scheduler={record['optim']['scheduler']!r}: "
            "the learning-rate schedule is spread over the original number of iterations"
        )
    changes = [{"key": k, "old": old, "new": new} for k, (old, new) in sorted(differences.items())]
    return Claim(resume_from=int(checkpoints[-1].name.rsplit("_", 1)[1]), changes=changes)


def open_run_directory(
    output_dir: Path,
    record: dict[str, Any],
    defaults: dict[str, Any],
    plan: dict[str, Any],
    *,
    resume: bool,
    overwrite: bool,
    changes: tuple[Sequence[str], frozenset[str]],
    say: Callable[[str], None],
) -> Claim:
    """Lock ``output_dir`` for this process (`orsd_gym.train.rundir_lock`; `release_run_directory`
    gives it back), check and claim it for the run ``record`` describes (`claim_run_directory`),
    clear what a stopped process left there, and write the run's record (``config.yaml``, its
    allowed changes, ``task_plan.json``). ``changes``: the settings the caller allows to differ
    from a resumed run's, and those that may (see `claim_run_directory`)."""
    allow_changes, safe = changes
    writable_directory(output_dir, "train.output_dir")
    # Owned by this process from here until `release_run_directory` (a second writer is refused).
    lock = rundir_lock.acquire(output_dir / rundir_lock.RUN_LOCK, f"run directory {output_dir}", say)
    try:
        claim = claim_run_directory(
            output_dir,
            record,
            resume=resume,
            overwrite=overwrite,
            allow_changes=allow_changes,
            defaults=defaults,
            safe=safe,
        )
    except BaseException:
        rundir_lock.release(lock)
        raise
    output_dir.mkdir(parents=True, exist_ok=True)
    if claim.restarted:
        say(f"{output_dir}: {claim.restarted}: starting it over")
    removed = remove_stale_temporaries(output_dir / "checkpoints")
    if removed:
        say(f"removed {len(removed)} half-written checkpoint(s) a stopped process left behind")
    record_changes(output_dir, claim)
    write_file(output_dir / "config.yaml", yaml.safe_dump(record, sort_keys=False), "the run's settings")
    write_file(output_dir / "task_plan.json", json.dumps(plan, indent=1), "the run's task plan")
    return claim


def release_run_directory(output_dir: Path) -> None:
    """Give back the lock `open_run_directory` took (the run has ended, however it ended)."""
    rundir_lock.release((output_dir / rundir_lock.RUN_LOCK).resolve())


def finished_from_records(
    output_dir: str | Path,
    record: Mapping[str, Any],
    *,
    allow_changes: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> bool:
    """Whether ``output_dir`` holds the run ``record`` describes, finished, with no checkpoint to
    resume: what a comparison kept without its weights. Raises `RunDirectoryError` when the
    finished run there was trained with other settings (naming them; ``allow_changes`` aside,
    except more iterations, which would need the weights), rather than let it be retrained over."""
    root = Path(output_dir)
    if list_checkpoints(root / "checkpoints"):
        return False
    return finished_run(root, record, allow_changes=allow_changes, defaults=defaults)


def finished_run(
    output_dir: str | Path,
    record: Mapping[str, Any],
    *,
    allow_changes: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> bool:
    """Whether ``output_dir`` holds the run ``record`` describes, finished (its records reach the
    last iteration), with or without its checkpoints. Raises `RunDirectoryError` when the
    finished run there was trained with other settings, as `finished_from_records` does."""
    root = Path(output_dir)
    if not _records_finished(root):
        return False
    saved = yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8"))
    differences = config_differences(saved, record, defaults)
    refused = {k: v for k, v in differences.items() if k not in set(allow_changes) or k == "train.iterations"}
    if refused:
        raise RunDirectoryError(
            f"{root} holds a finished run of other settings: "
            f"{_refusal(refused, SAFE_CHANGES - {'train.iterations'})}; "
            "otherwise train it again in another directory (or start over with --fresh)"
        )
    return True


def _refusal(refused: Mapping[str, tuple[Any, Any]], allowable: Iterable[str]) -> str:
    """Each refused setting with both values, and how to consent to those that may change."""
    lines = "; ".join(f"{k}: {old!r} in the run, {new!r} now" for k, (old, new) in sorted(refused.items()))
    safe = sorted(set(refused) & set(allowable))
    return lines + (f" (to change {', '.join(safe)} on purpose, pass --allow-change {','.join(safe)})" if safe else "")


def _records_finished(root: Path) -> bool:
    """Whether the run in ``root`` recorded its last iteration (config.yaml's train.iterations)."""
    saved_path = root / "config.yaml"
    try:
        saved = yaml.safe_load(saved_path.read_text(encoding="utf-8")) if saved_path.is_file() else None
        iterations = int(saved["train"]["iterations"])
    except (yaml.YAMLError, TypeError, KeyError, ValueError):
        return False
    recorded = [int(r.get("iteration", -1)) for r in read_metrics(root / "metrics.jsonl")]
    return iterations in recorded


#: The records that make a directory a run worth keeping (with its checkpoints): measured results.
RESULT_RECORDS = ("metrics.jsonl", "eval.jsonl", "teacher.jsonl")


def _has_records(root: Path) -> bool:
    """Whether ``root`` holds any measured record (a metrics, evaluation or teacher line). Other
    files (the saved settings, a task plan, an audit, a lock of another tool) are no run."""
    return any(read_metrics(root / name) for name in RESULT_RECORDS)


def _same_run(root: Path, record: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> bool:
    """Whether ``root``'s saved config.yaml is ``record`` (what a run saves before it trains)."""
    saved_path = root / "config.yaml"
    try:
        saved = yaml.safe_load(saved_path.read_text(encoding="utf-8")) if saved_path.is_file() else None
    except yaml.YAMLError:
        return False
    return isinstance(saved, dict) and not config_differences(saved, record, defaults)


def _remove(root: Path, names: Iterable[str]) -> None:
    for name in names:
        path = root / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def record_changes(output_dir: str | Path, claim: Claim) -> None:
    """Append the allowed changes of a resumption to ``changes.jsonl``."""
    if not claim.changes:
        return
    lines = [json.dumps({"time": time.time(), "at_checkpoint": claim.resume_from, **c}) + "\n" for c in claim.changes]
    append_text(Path(output_dir) / "changes.jsonl", "".join(lines), "the run's allowed changes")


def config_differences(
    saved: Mapping[str, Any], requested: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (saved, requested) for every leaf setting that differs (`IGNORED` aside); a
    key ``saved`` lacks takes its value in ``defaults``, when given.

    A request with no ``probes`` (a process handed no probe, e.g. a `Trainer` built without
    ``callbacks``; it refuses any ``probes.*`` setting) does not compare the run's recorded probe
    settings: they only say what the run measured beside training, and such a process measures
    nothing."""
    if "probes" not in requested:
        saved = {key: value for key, value in saved.items() if key != "probes"}
    left, right = _flatten(configio.rename_keys(saved, Config.renamed_keys)), _flatten(requested)
    if defaults is not None:
        # A default stands in only where the run saved nothing under that key: a default `{}`
        # (env.kwargs) must not shadow the leaves of the mapping the run did save there.
        left = {**{k: v for k, v in _flatten(defaults).items() if not _saved_under(k, left)}, **left}
    return {
        key: (left.get(key), right.get(key))
        for key in sorted(set(left) | set(right))
        if key not in IGNORED and left.get(key) != right.get(key)
    }


def _saved_under(key: str, flat: Mapping[str, Any]) -> bool:
    """Whether ``flat`` holds ``key``, a setting inside it or a setting it is inside of."""
    return any(k == key or k.startswith(f"{key}.") or key.startswith(f"{k}.") for k in flat)


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested mapping under its dotted key (an empty mapping is a leaf)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = _plain(value)
    return flat


def _plain(value: Any) -> Any:
    """YAML round-trips tuples as lists; compare them as such."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def resume_message(output_dir: Path, start: int, iterations: int, changes: Sequence[Mapping[str, Any]]) -> str:
    """What a resumed run says: where it resumes (or that it has finished), with its allowed changes."""
    listed = ", ".join(f"{c['key']} {c['old']!r} -> {c['new']!r}" for c in changes)
    where = f"resumed {output_dir} at iteration {start} of {iterations}"
    if start >= iterations:
        where = f"{output_dir} already finished all {iterations} iterations; nothing to train"
    return where + (f" (allowed changes: {listed})" if listed else "")


def last_evaluation(output_dir: Path) -> dict[str, float] | None:
    """The latest evaluation a run recorded (what a finished run reports when resumed)."""
    path = output_dir / "eval.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    if not lines:
        return None
    return {k: v for k, v in json.loads(lines[-1]).items() if k.startswith("eval/")}
