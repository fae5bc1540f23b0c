"""One writer per run directory, progress a log file shows from the first minute of every phase,
and SIGTERM handled as Ctrl-C is."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_run_directories_and_cli import RUN, TESTS

from orsd_gym import progress
from orsd_gym.cli import main
from orsd_gym.train import rundir_lock

ROOT = Path(__file__).resolve().parents[1]


def _empty_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("{}\n")
    return path


class _Holder:
    """Another process holding a lock file (as a live run or comparison would), until killed."""

    def __init__(self, lock_path: Path) -> None:
        code = (
            "import sys, time; from orsd_gym.train import rundir_lock; "
            "rundir_lock.acquire(sys.argv[1], 'test'); print('held', flush=True); time.sleep(600)"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, "-c", code, str(lock_path)], stdout=subprocess.PIPE, env=env)
        assert self.process.stdout.readline().strip() == b"held"
        self.pid = self.process.pid

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: no clean-up, the lock file stays behind
        self.process.wait()


def _one_line(err: str) -> str:
    """The error line of a refused command (stderr holds nothing else)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_a_second_writer_of_a_live_run_is_refused_and_a_dead_owners_lock_taken_over(tmp_path, capsys):
    run = tmp_path / "run"
    train = ["train", "--config", str(_empty_yaml(tmp_path)), "--no-live", *RUN, f"train.output_dir={run}"]
    holder = _Holder(run / rundir_lock.RUN_LOCK)
    try:
        assert main(train) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"run directory {run} is in use by pid {holder.pid} on " in line, line
        assert not (run / "config.yaml").exists() and not (run / "metrics.jsonl").exists()  # nothing written
    finally:
        holder.kill()
    # Its owner died without a word: the next run takes the lock over, says so, and gives it back.
    assert (run / rundir_lock.RUN_LOCK).exists()
    assert main(train) == 0
    out = capsys.readouterr().out
    assert f"its owner, pid {holder.pid} on " in out and "is no longer running" in out, out
    assert [r["iteration"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] == [1]
    assert not (run / rundir_lock.RUN_LOCK).exists()


def test_a_process_may_take_its_own_lock_again_and_the_last_release_removes_it(tmp_path):
    lock = rundir_lock.acquire(tmp_path / "a.lock", "test")
    assert rundir_lock.acquire(tmp_path / "a.lock", "test") == lock
    rundir_lock.release(lock)
    assert lock.exists() and json.loads(lock.read_text())["pid"] == os.getpid()
    rundir_lock.release(lock)
    assert not lock.exists() and not rundir_lock.held_here(lock)


def test_comparisons_sharing_an_out_with_the_same_seed_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    compare = ["compare", "--config", str(_empty_yaml(tmp_path)), "--algos", "grpo", "--out", str(out), "--no-live"]
    holder = _Holder(out / "seed1.lock")  # a comparison process training seed 1 there
    try:
        assert main([*compare, "--seed-list", "0,1", *RUN]) == 2
        line = _one_line(capsys.readouterr().err)
        assert f"seed 1 of the comparison in {out} is in use by pid {holder.pid}" in line, line
        assert not (out / "runs").exists() and not (out / "seed0.lock").exists()  # nothing trained, nothing kept
    finally:
        holder.kill()
    # --fresh never deletes a run that a live `orsd-gym train` owns.
    live_run = out / "runs" / "grpo-seed2"
    live_run.mkdir(parents=True)
    (live_run / "metrics.jsonl").write_text("{}\n")
    holder = _Holder(live_run / rundir_lock.RUN_LOCK)
    try:
        assert main([*compare, "--seed-list", "2", "--fresh", *RUN]) == 2
        assert f"run directory {live_run} is in use by pid {holder.pid}" in _one_line(capsys.readouterr().err)
        assert (live_run / "metrics.jsonl").read_text() == "{}\n"
    finally:
        holder.kill()


def _cli(*args: str, every: float) -> list[str]:
    """The command as a process whose output goes to a log file, not a terminal."""
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import resumable_env; "
        "from orsd_gym.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", progress.EVERY_VARIABLE: str(every), "PYTHONPATH": str(ROOT)}
    return [sys.executable, "-c", code, *args], env


STAMP = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\] (.*)$")


def _stamped(log: str) -> list[tuple[int, str]]:
    """(seconds of the day, text) of each progress line."""
    found = [STAMP.match(line) for line in log.splitlines()]
    return [(int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]), m[4]) for m in found if m]


def test_every_phase_of_a_run_in_a_log_file_starts_with_a_line_and_is_never_silent(tmp_path):
    """A run with a warm start, written to a file: each phase prints a line when it starts, and
    none is silent for longer than the progress interval (here 0.2 s instead of a minute)."""
    args, env = _cli(
        "train",
        "--config",
        str(_empty_yaml(tmp_path)),
        "--no-live",
        *RUN,
        "warm_start.episodes=2",
        "warm_start.epochs=1",
        f"train.output_dir={tmp_path / 'run'}",
        every=0.2,
    )
    log_path = tmp_path / "log.txt"
    with open(log_path, "w") as log:
        done = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=600)
    text = log_path.read_text()
    assert done.returncode == 0, text
    lines = _stamped(text)
    started = [line for _, line in lines if line.endswith(": started")]
    for phase in (
        "setting up",
        "warm start",
        "warm start: playing the demonstrations",
        "warm start: cloning, epoch 1/1",
    ):
        assert any(line.endswith(f"> {phase}: started") for line in started), (phase, text)
    run = "grpo on orsd_gym/VowelTest-v0"
    for step in ("eval", "rollout 1", "advantages 1", "update 1"):
        assert f"orsd-gym train > {run}: {step}: started" in started, (step, text)
    assert any("running for" in line for _, line in lines), text  # the periodic lines
    gaps = [later - earlier for (earlier, _), (later, _) in zip(lines, lines[1:], strict=False)]
    assert max(gaps) <= 5, text  # at 0.2 s per line, a gap of seconds is a silent phase


def test_a_phase_prints_a_line_whenever_it_has_been_silent_for_the_interval():
    now = [0.0]
    lines: list[str] = []
    with progress.reporting(lines.append, every=60.0, clock=lambda: now[0]) as reporter:
        with progress.phase("run grpo-seed0 (1/2)"), progress.budget(4):
            progress.step("rollout 1")
            progress.note("3/8 episodes played")
            now[0] = 59.0
            reporter.beat()
            assert len(lines) == 2  # the two start lines: a minute has not passed
            now[0] = 61.0
            reporter.beat()
            progress.advance(1)  # one of the comparison's four iterations, in 61 s
            now[0] = 130.0
            reporter.beat()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "run grpo-seed0 (1/2): started",
        "run grpo-seed0 (1/2): rollout 1: started",
        "run grpo-seed0 (1/2): rollout 1: running for 0:01:01, 3/8 episodes played",
        "run grpo-seed0 (1/2): rollout 1: running for 0:02:10, 3/8 episodes played, comparison ETA 0:06:30",
    ]


def test_a_bad_interval_in_the_environment_is_named_not_a_traceback(monkeypatch):
    lines: list[str] = []
    monkeypatch.setenv(progress.EVERY_VARIABLE, "soon")
    with progress.reporting(lines.append) as reporter:
        assert reporter.every == progress.DEFAULT_EVERY
    assert lines == [f"{progress.EVERY_VARIABLE}='soon' is not a number of seconds above 0: using 60"]


def test_the_iteration_line_carries_the_whole_comparisons_eta():
    from orsd_gym.train.console import LiveView

    now = [0.0]
    with progress.reporting(lambda line: None, every=60.0, clock=lambda: now[0]), progress.budget(8):
        progress.advance(2, timed=False)  # a first run that finished before: no pace of its own
        view = LiveView("grpo on env", 2, 0, enabled=False)
        with view:
            now[0] = 30.0
            view.update(1, {"time/iteration": 30.0})
            line = view.line(1, {"time/iteration": 30.0})
    assert line.endswith("| comparison ETA 0:02:30"), line  # 5 iterations left at 30 s each


def test_a_rollout_notes_its_episodes_for_the_progress_lines(policy):
    from resumable_env import ENV_ID

    from orsd_gym.policies.base import SamplingParams
    from orsd_gym.rollout.collector import collect
    from orsd_gym.rollout.options import RolloutOptions

    now = [0.0]
    lines: list[str] = []
    with progress.reporting(lines.append, every=60.0, clock=lambda: now[0]) as reporter:
        with progress.phase("rollout"):
            options = RolloutOptions(action_format="last_line")
            collect(ENV_ID, policy, [0, 1], group_size=2, options=options, sampling=SamplingParams(max_new_tokens=4))
            now[0] = 61.0
            reporter.beat()
    assert lines[-1].endswith("rollout: running for 0:01:01, 4/4 episodes played (0 won) after 1 turn(s)"), lines


def test_sigterm_ends_a_run_as_ctrl_c_does_saying_where_it_stopped_and_freeing_its_directory(tmp_path):
    run = tmp_path / "run"
    args, env = _cli(
        "train",
        "--config",
        str(_empty_yaml(tmp_path)),
        "--no-live",
        *RUN,
        "train.iterations=100000",
        f"train.output_dir={run}",
        every=60,
    )
    log_path = tmp_path / "log.txt"
    with open(log_path, "w") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 300
        while "iteration 2/" not in log_path.read_text() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert process.poll() is None, log_path.read_text()
        assert (run / rundir_lock.RUN_LOCK).exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 128 + signal.SIGTERM
    last = log_path.read_text().strip().splitlines()[-1]
    assert re.fullmatch(
        r"orsd-gym train: terminated \(SIGTERM\) during orsd-gym train > grpo on \S+: \S+( \d+)?; "
        r"continue from the last checkpoint with the same command and --resume",
        last,
    ), last
    assert not (run / rundir_lock.RUN_LOCK).exists()  # the directory is free for the resumption


def test_sigterm_ends_any_command_with_a_line_saying_where(tmp_path):
    from resumable_env import ENV_ID

    out = tmp_path / "t.jsonl"
    args, env = _cli(
        "rollout",
        "--env",
        ENV_ID,
        "--model",
        "tiny-random",
        "--tasks",
        "100000",
        "--out",
        str(out),
        "--quiet",
        every=60,
    )
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    seen = ""
    while "playing: started" not in seen:
        line = process.stderr.readline()
        assert line, f"the rollout ended before it played: {seen}"
        seen += line
    process.send_signal(signal.SIGTERM)
    err = seen + process.stderr.read()
    assert process.wait(timeout=120) == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == (
        "orsd-gym rollout: terminated (SIGTERM) during orsd-gym rollout > rollout of 200000 episodes: playing"
    ), err
