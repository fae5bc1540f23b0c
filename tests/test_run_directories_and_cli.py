"""Run directories that always describe what trained them, mistakes caught before anything loads,
and command-line output a person or a script can follow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from resumable_env import ENV_ID as VOWEL_ENV

from orsd_gym.cli import main
from orsd_gym.errors import RunDirectoryError, UsageError
from orsd_gym.experiments.compare import compare, report_finished
from orsd_gym.rollout import load_jsonl
from orsd_gym.train.config import load_config
from orsd_gym.train.metrics import read_metrics
from orsd_gym.train.rundir import config_differences
from orsd_gym.train.trainer import Trainer

TESTS = Path(__file__).parent / "helpers"
RUN = [
    "model.name=tiny-random",
    f"env.id={VOWEL_ENV}",
    "rollout.tasks_per_iteration=1",
    "rollout.group_size=2",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=4",
    "rollout.action_format=last_line",
    "eval.every=1",
    "eval.num_tasks=2",
    "train.iterations=1",
    "train.threads=1",
    "logging.live=false",
    "logging.tensorboard=false",
]


def _config(out: Path, *extra: str):
    return load_config(None, [*RUN, f"train.output_dir={out}", *extra])


def _snapshot(directory: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in directory.rglob("*")}


def _contents(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    Trainer(_config(out)).run()
    return out


def test_a_fresh_run_never_mixes_with_a_run_already_there(finished_run, tmp_path):
    before = _snapshot(finished_run)
    with pytest.raises(RunDirectoryError, match="already holds a run.*--resume.*--overwrite"):
        Trainer(_config(finished_run))
    assert _snapshot(finished_run) == before  # refused before writing anything
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(finished_run), str(copy)], check=True)
    Trainer(_config(copy), overwrite=True).run()
    assert [r["iteration"] for r in read_metrics(copy / "eval.jsonl")] == [0, 1]  # not 0, 1, 0, 1


@pytest.mark.parametrize(
    ("change", "named"),
    [("optim.lr=0.5", "optim.lr: 1e-05 in the run, 0.5 now"), ("algo.name=orsd", "algo.name: 'grpo' in the run")],
)
def test_resume_refuses_other_settings_before_writing(finished_run, change, named):
    before = _snapshot(finished_run)
    with pytest.raises(RunDirectoryError, match="other settings") as refused:
        Trainer(_config(finished_run, change), resume=True)
    assert named in str(refused.value)
    assert _snapshot(finished_run) == before


def test_more_iterations_need_consent_and_are_recorded(finished_run, tmp_path):
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(finished_run), str(run)], check=True)
    with pytest.raises(RunDirectoryError, match="--allow-change train.iterations"):
        Trainer(_config(run, "train.iterations=2"), resume=True)
    summary = Trainer(_config(run, "train.iterations=2"), resume=True, allow_changes=["train.iterations"]).run()
    assert summary.resumed_from == 1 and [r["iteration"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]
    (change,) = [json.loads(line) for line in (run / "changes.jsonl").read_text().splitlines()]
    assert (change["key"], change["old"], change["new"]) == ("train.iterations", 1, 2)
    with pytest.raises(RunDirectoryError, match="only these settings may change"):
        Trainer(_config(run, "train.iterations=2", "optim.lr=0.5"), resume=True, allow_changes=["optim.lr"])


def test_a_resume_that_allows_an_optimiser_change_trains_with_the_new_setting(finished_run, tmp_path):
    """A run moved to a smaller machine resumes under a memory budget: AdamW then steps one
    tensor at a time (the budget's setting), not as the checkpoint's optimiser state says."""
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(finished_run), str(run)], check=True)
    changes = ["train.iterations", "optim.max_memory_gb", "optim.micro_batch_tokens"]
    overrides = ("train.iterations=2", "optim.max_memory_gb=8", "optim.micro_batch_tokens=1024")
    trainer = Trainer(_config(run, *overrides), resume=True, allow_changes=changes)
    trainer.run()
    assert [g["foreach"] for g in trainer.optimizer.param_groups] == [False]
    assert [r["lr"] for r in read_metrics(run / "metrics.jsonl")] == [1e-5, 1e-5]
    with pytest.raises(RunDirectoryError, match="only these settings may change"):
        Trainer(_config(run, "optim.lr=0.5"), resume=True, allow_changes=["optim.lr"])


def test_resume_says_when_there_is_nothing_to_resume_or_to_train(finished_run, tmp_path):
    with pytest.raises(RunDirectoryError, match="nothing to resume"):
        Trainer(_config(tmp_path / "missing"), resume=True)
    summary = Trainer(_config(finished_run), resume=True).run()
    assert summary.final_eval is not None and "eval/success_rate" in summary.final_eval


def test_a_run_stopped_before_its_first_checkpoint_restarts_with_the_same_command(finished_run, tmp_path):
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(finished_run), str(run)], check=True)
    _crash_in_first_iteration(run)
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        Trainer(_config(run, "optim.lr=0.5"))  # another run's directory is never taken over
    Trainer(_config(run)).run()
    assert [r["iteration"] for r in read_metrics(run / "eval.jsonl")] == [0, 1]
    _crash_in_first_iteration(run)
    assert Trainer(_config(run), resume=True).run().final_eval is not None  # --resume too


def test_a_directory_with_no_checkpoint_and_no_metrics_is_started_over_by_the_corrected_command(tmp_path, monkeypatch):
    """A run stopped before its first iteration (Ctrl-C while its model loads) left only its
    settings: the corrected command, other settings and all, starts it over and says so. A
    file another tool keeps there (a lock) is no run and is left alone."""
    from io import StringIO

    from rich.console import Console

    from orsd_gym.train import trainer

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    run = tmp_path / "run"
    monkeypatch.setattr(trainer, "load_policy", stopped)
    with pytest.raises(KeyboardInterrupt):
        Trainer(_config(run, "optim.lr=0.5"))
    monkeypatch.undo()
    assert (run / "config.yaml").is_file() and not (run / "metrics.jsonl").exists()
    (run / ".lock").write_text("12345\n")
    said = StringIO()
    Trainer(_config(run), console=Console(file=said, width=300)).run()
    assert f"{run}: it holds no checkpoint and no metrics" in said.getvalue() and "starting it over" in said.getvalue()
    assert [r["iteration"] for r in read_metrics(run / "eval.jsonl")] == [0, 1]
    assert (run / ".lock").read_text() == "12345\n"


def _crash_in_first_iteration(run: Path) -> None:
    """Leave ``run`` as a run that crashed in its first iteration leaves it: no checkpoint, no
    iteration recorded."""
    shutil.rmtree(run / "checkpoints")
    (run / "metrics.jsonl").write_text("")


def test_a_finished_run_kept_without_its_checkpoints_is_never_retrained_over(finished_run, tmp_path):
    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(finished_run), str(run)], check=True)
    shutil.rmtree(run / "checkpoints")
    before = _snapshot(run)
    with pytest.raises(RunDirectoryError, match="finished run whose checkpoints are gone"):
        Trainer(_config(run))
    with pytest.raises(RunDirectoryError, match="finished run whose checkpoints are gone"):
        Trainer(_config(run), resume=True)
    assert _snapshot(run) == before


def test_a_checkpoint_write_stopped_midway_leaves_nothing_behind(finished_run, tmp_path, monkeypatch):
    import errno

    from orsd_gym.errors import DiskWriteError
    from orsd_gym.train import checkpoint as checkpoints

    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(finished_run), str(run)], check=True)
    killed = run / "checkpoints" / ".iter_000002.tmp-999999"  # what kill -9 during a write leaves
    killed.mkdir()
    (killed / "policy.safetensors").write_bytes(b"half")
    Trainer(_config(run), resume=True)
    assert not killed.exists()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints, "save_file", full_disk)
    kept = r"the last good checkpoint \(iter_000001, iteration 1\) is intact"
    with pytest.raises(DiskWriteError, match=r"disk under .* is full.*" + kept):
        checkpoints.save_checkpoint(run / "checkpoints", 2, policy_state={}, optimizer_tensors={}, state={})
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["iter_000001"]


def test_outputs_that_cannot_be_written_fail_before_any_work():
    from orsd_gym.errors import ConfigError, UsageError

    with pytest.raises(UsageError, match=r"train.output_dir='/proc/orsd-run': cannot create the directory"):
        Trainer(_config(Path("/proc/orsd-run")))
    with pytest.raises(ConfigError, match="output_dir is empty"):
        load_config(None, [*RUN, "train.output_dir="])
    with pytest.raises(UsageError, match="--out.*'/proc/orsd-report': cannot create the directory"):
        compare(load_config(None, RUN), ["grpo"], [0], "/proc/orsd-report", live=False)
    rolled = _cli("rollout", "--env", f"resumable_env:{VOWEL_ENV}", "--model", "tiny-random", "--out", "/proc/x.jsonl")
    assert rolled.returncode == 2 and "--out='/proc/x.jsonl': cannot write in /proc" in rolled.stderr
    assert "Traceback" not in rolled.stderr and "trajectories" not in rolled.stdout  # nothing was played


def test_a_read_only_output_directory_fails_before_any_work(tmp_path):
    from orsd_gym.errors import UsageError

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root): a read-only directory cannot be made")
        with pytest.raises(UsageError, match="train.output_dir=.*cannot write in"):
            Trainer(_config(locked / "run"))
    finally:
        locked.chmod(0o700)


def test_compare_refuses_to_reuse_runs_of_other_settings(tmp_path):
    base = load_config(None, [*RUN, "eval.every=0"])
    compare(base, ["grpo"], [0], tmp_path, live=False)
    changed = load_config(None, [*RUN, "eval.every=0", "rollout.group_size=3"])
    with pytest.raises(RunDirectoryError, match="rollout.group_size: 2 in the run, 3 now"):
        compare(changed, ["grpo"], [0], tmp_path, live=False)
    faster = load_config(None, [*RUN, "eval.every=0", "train.threads=2"])
    with pytest.raises(RunDirectoryError, match="--allow-change train.threads"):
        compare(faster, ["grpo"], [0], tmp_path, live=False)
    compare(faster, ["grpo"], [0], tmp_path, live=False, allow_changes=["train.threads"])
    (change,) = [
        json.loads(line) for line in (tmp_path / "runs" / "grpo-seed0" / "changes.jsonl").read_text().splitlines()
    ]
    assert (change["key"], change["old"], change["new"]) == ("train.threads", 1, 2)


def test_a_comparison_kept_without_checkpoints_reads_its_finished_runs(tmp_path):
    base = load_config(None, [*RUN, "eval.every=0"])
    compare(base, ["grpo"], [0], tmp_path, live=False)
    run = tmp_path / "runs" / "grpo-seed0"
    shutil.rmtree(run / "checkpoints")  # what a committed comparison keeps: its records, no weights
    report = (tmp_path / "results.json").read_text()
    before = _snapshot(run)
    compare(base, ["grpo"], [0], tmp_path, live=False)
    assert _snapshot(run) == before and (tmp_path / "results.json").read_text() == report
    more = load_config(None, [*RUN, "eval.every=0", "train.iterations=2"])
    with pytest.raises(RunDirectoryError, match="train.iterations: 1 in the run, 2 now"):
        compare(more, ["grpo"], [0], tmp_path, live=False, allow_changes=["train.iterations"])
    # Read on a machine with another thread count: a setting the reader may consent to.
    faster = load_config(None, [*RUN, "eval.every=0", "train.threads=2"])
    with pytest.raises(RunDirectoryError, match="--allow-change train.threads"):
        compare(faster, ["grpo"], [0], tmp_path, live=False)
    compare(faster, ["grpo"], [0], tmp_path, live=False, allow_changes=["train.threads"])
    assert _snapshot(run) == before


def test_an_interim_report_reads_the_finished_runs_and_trains_nothing(tmp_path):
    base = load_config(None, RUN)
    with pytest.raises(UsageError, match="no finished run"):
        report_finished(base, ["grpo"], [0], tmp_path)
    compare(base, ["grpo"], [0], tmp_path, live=False)
    runs = _snapshot(tmp_path / "runs")
    report, left_out = report_finished(base, ["grpo", "orsd"], [0, 1], tmp_path)
    assert _snapshot(tmp_path / "runs") == runs  # nothing trained, nothing touched
    assert left_out == ["orsd-seed0", "grpo-seed1", "orsd-seed1"]
    assert [r["seed"] for r in json.loads((tmp_path / "results.json").read_text())["runs"].values()] == [0]
    assert report.read_text().startswith("# grpo on")
    # A finished run of other settings is refused, as the comparison refuses it.
    changed = load_config(None, [*RUN, "rollout.group_size=3"])
    with pytest.raises(RunDirectoryError, match="rollout.group_size: 2 in the run, 3 now"):
        report_finished(changed, ["grpo"], [0], tmp_path)
    with pytest.raises(UsageError, match="leave out random"):
        report_finished(base, ["grpo", "random"], [0], tmp_path)


def test_the_study_script_reports_a_usage_error_in_one_line(tmp_path):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "orsd_study.py"
    done = subprocess.run(
        [sys.executable, str(script), "--report-only", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"orsd_study.py: error: no finished run in {tmp_path / 'runs'}: nothing to report"


def test_processes_sharing_a_report_directory_train_their_own_seeds(tmp_path, capsys):
    compare_args = ["compare", "--config", str(_empty_yaml(tmp_path)), "--algos", "grpo", "--out", str(tmp_path)]
    for seeds in ("1", "0"):  # as two processes would, each with its own seeds
        assert main([*compare_args, "--seed-list", seeds, "--no-live", *RUN]) == 0
    runs = tmp_path / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["grpo-seed0", "grpo-seed1"]
    trained = _contents(runs)
    assert main([*compare_args, "--seeds", "2", "--no-live", *RUN]) == 0  # reads both: trains nothing
    assert _contents(runs) == trained
    runs_read = json.loads((tmp_path / "results.json").read_text())["runs"].values()
    assert sorted(r["seed"] for r in runs_read) == [0, 1]
    before = _snapshot(runs)
    assert main([*compare_args, "--seed-list", "1", "--fresh", "--no-live", *RUN]) == 0
    after = _snapshot(runs)
    for path, stamp in before.items():  # --fresh retrained seed 1 only
        assert (after.get(path) == stamp) == ("grpo-seed0" in path), path
    capsys.readouterr()
    assert main([*compare_args, "--seed-list", "1,x", *RUN]) == 2
    assert "--seed-list '1,x'" in capsys.readouterr().err


def test_a_moved_comparison_resumes_with_its_warm_start_in_the_new_place():
    saved = {"warm_start": {"episodes": 4, "path": "/old/compare/warm_start/seed0.safetensors"}}
    moved = {"warm_start": {"episodes": 4, "path": "/new/compare/warm_start/seed0.safetensors"}}
    assert config_differences(saved, moved) == {}
    assert config_differences(saved, {"warm_start": {**moved["warm_start"], "episodes": 8}}) == {
        "warm_start.episodes": (4, 8)
    }


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["env.id=orsd_gym/Alfworld-v0"], "did you mean 'orsd_gym/ALFWorld-v0'"),
        (["env.kwargs.splt=generated"], "env.kwargs.splt"),
        (["rollout.layout=tree"], "rollout.layout"),
        (["rollout.action_format=json"], "action_format"),
        (["model.name=smollm2-135"], "did you mean 'smollm2-135m'"),
        (["env.id=orsd_gym/GuessNumber-v0", "env.kwargs={goal_split: train}"], "env.kwargs.goal_split"),
        (["env.id=orsd_gym/GuessNumber-v0", "env.kwargs={split: bogus}"], "split='bogus'"),
    ],
)
def test_mistakes_fail_fast_with_one_line_naming_the_key(overrides, named, tmp_path, capsys):
    started = time.perf_counter()
    code = main(["train", "--config", str(_empty_yaml(tmp_path)), f"train.output_dir={tmp_path / 'out'}", *overrides])
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err.strip()
    assert code == 2 and named in err and len(err.splitlines()) == 1, err
    assert elapsed < 1.0, f"took {elapsed:.2f} s"
    assert not (tmp_path / "out").exists()  # nothing was written


def test_train_needs_a_config(capsys):
    with pytest.raises(SystemExit):
        main(["train", "train.iterations=1"])
    assert "--config" in capsys.readouterr().err


def test_webshop_on_the_synthetic_catalog_says_so(tmp_path, monkeypatch):
    pytest.importorskip("spacy")
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    config = load_config(
        None,
        [
            "env.id=orsd_gym/WebShop-v0",
            "model.name=tiny-random",
            "eval.num_tasks=2",
            f"train.output_dir={tmp_path}",
            "train.iterations=0",
            "eval.every=0",
        ],
    )
    Trainer(config, console=None)
    plan = json.loads((tmp_path / "task_plan.json").read_text())
    assert any("synthetic" in warning for warning in plan["summary"]["warnings"])


def _empty_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("{}\n")
    return path


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import resumable_env; "
        "from orsd_gym.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_no_live_prints_a_line_per_iteration_and_json_only_on_request(tmp_path):
    config = _empty_yaml(tmp_path)
    plain = _cli(
        "train", "--config", str(config), "--no-live", *RUN, "train.iterations=2", f"train.output_dir={tmp_path / 'a'}"
    )
    assert plain.returncode == 0, plain.stderr
    lines = [line for line in plain.stdout.splitlines() if "| iteration " in line]
    assert [line.split("| iteration ")[1].split(" ")[0] for line in lines] == ["1/2", "2/2"]
    assert "{" not in plain.stdout  # no JSON glued to the human output
    scripted = _cli("train", "--config", str(config), "--no-live", "--json", *RUN, f"train.output_dir={tmp_path / 'b'}")
    assert scripted.returncode == 0, scripted.stderr
    assert "final_eval" in json.loads(scripted.stdout)


def test_the_iteration_line_prints_the_iteration_wall_time_not_a_sum_of_nested_phases():
    from orsd_gym.train.console import LiveView

    # ORSD's phases are parts of time/prepare; summing every time/ key counted them three times.
    record = {"time/rollout": 16.0, "time/prepare": 29.0, "time/orsd_total": 29.0, "time/orsd_propose": 11.0}
    record.update({"time/orsd_verify": 13.0, "time/update": 56.0, "time/iteration": 112.0})
    view = LiveView("orsd on env", 3, 0, enabled=False)
    assert view.line(1, record).endswith("| 112.0 s")


def test_progress_is_a_line_per_iteration_when_the_output_is_not_a_terminal():
    import io

    from rich.console import Console

    from orsd_gym.train.console import LiveView

    log = io.StringIO()
    with LiveView("grpo on env", 2, 0, enabled=True, console=Console(file=log)) as view:
        view.update(1, {"train/success_rate": 0.25, "time/iteration": 3.0})
        assert "iteration 1/2 | train success 0.250" in log.getvalue()  # at once, not at the end
    terminal = LiveView("grpo on env", 2, 0, enabled=True, console=Console(file=io.StringIO(), force_terminal=True))
    assert terminal.enabled


def test_config_show_help_defaults_and_rollout_options(tmp_path):
    shown = _cli("config", "show", "--config", "demo", "optim.lr=3e-5")
    assert shown.returncode == 0 and "lr: 3.0e-05" in shown.stdout and "num_bundles" not in shown.stdout
    assert "clip_low: 0.2" in shown.stdout  # the algorithm's settings, every default included
    helped = _cli("compare", "--help")
    assert "(default: grpo,orsd)" in " ".join(helped.stdout.split())  # wherever argparse wraps the line
    out = tmp_path / "r.jsonl"
    rolled = _cli(
        "rollout",
        "--env",
        f"resumable_env:{VOWEL_ENV}",
        "--model",
        "tiny-random",
        "--tasks",
        "1",
        "--group",
        "1",
        "--max-new-tokens",
        "4",
        "--action-format",
        "tag",
        "--threads",
        "1",
        "--out",
        str(out),
        "--quiet",
    )
    assert rolled.returncode == 0, rolled.stderr
    assert "<action>" in load_jsonl(out)[0].prompt_messages[0]["content"]  # the chosen format's instructions


def test_the_demo_command_runs_end_to_end_on_a_tiny_model(tmp_path, capsys):
    """`orsd-gym demo` (what `make demo` runs) with its preset shrunk to seconds: both arms train,
    the report is written, and a second call continues the finished runs."""
    shrink = [
        "model.name=tiny-random",
        "warm_start.episodes=0",
        "train.iterations=1",
        "rollout.tasks_per_iteration=1",
        "rollout.group_size=2",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=4",
        "eval.num_tasks=1",
    ]
    out = tmp_path / "demo"
    args = ["demo", "--seeds", "1", "--out", str(out), "--no-live", "--threads", "1", *shrink]
    assert main(args) == 0
    assert (out / "report.md").is_file() and sorted(p.name for p in (out / "runs").iterdir()) == [
        "grpo-seed0",
        "orsd-seed0",
    ]
    assert main([*args, "--allow-change", "train.threads"]) == 0
    assert "nothing to train" in capsys.readouterr().out
