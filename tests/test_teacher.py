"""The teacher test: the same held-out tasks and seeds played with and without a rubric in context."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from resumable_env import ENV_ID as VOWELS

from orsd_gym.errors import ConfigError
from orsd_gym.policies.base import Completion, SamplingParams
from orsd_gym.probes import check_probes, probes_for
from orsd_gym.probes.teacher import (
    RubricContext,
    other_tasks_rubrics,
    paired_gain,
    success_by_task,
    teacher_episodes,
    teacher_test,
    training_teacher_metrics,
    training_teacher_pairs,
)
from orsd_gym.rollout.collector import TaskSpec, collect
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.train.config import load_config
from orsd_gym.train.stats import mean_ci
from orsd_gym.train.trainer import Trainer

GUESS = "orsd_gym/GuessNumber-v0"
RUBRIC = ["guesses the middle of the range first", "halves the range after every reply"]


def test_teacher_test_plays_both_arms_on_the_same_tasks_and_seeds(policy, tmp_path):
    rubric_file = tmp_path / "rubrics.yaml"
    rubric_file.write_text("'*':\n" + "".join(f"  - {c}\n" for c in RUBRIC))
    options = RolloutOptions(max_turns=2, action_format="last_line")
    sampling = SamplingParams(max_new_tokens=6, seed=7)
    tasks = [TaskSpec(seed=100 + n) for n in range(3)]
    played = []

    def play(edit=None):
        trajectories = collect(GUESS, policy, tasks, group_size=2, sampling=sampling, options=options, edit_prompt=edit)
        played.append(trajectories)
        return trajectories

    baseline = play()
    metrics, record = teacher_test(play, baseline, RubricContext(), "file", seed=0, rubric_file=str(rubric_file))
    none, own, other = played
    # Same tasks, same reset seeds, same episodes: only the prompt differs.
    for arm in (own, other):
        assert [(t.task_id, t.seed, t.episode_id) for t in arm] == [(t.task_id, t.seed, t.episode_id) for t in none]
    assert all(t.extra.get("privileged_prompt") for t in own)
    assert not any(t.extra.get("privileged_prompt") for t in none)
    assert all(RUBRIC[0] in t.prompt_messages[0]["content"] for t in own)
    assert not any(RUBRIC[0] in t.prompt_messages[0]["content"] for t in none)
    # The context is the policy's own input: the sampled tokens follow the rendered, edited prompt.
    assert all(policy.chat.prompt_tokens(t.prompt_messages) == t.token_ids[: t.spans[0].end] for t in own)
    # With "*" every task has the same rubric, so "another task's" is the same text.
    assert all(RUBRIC[0] in t.prompt_messages[0]["content"] for t in other)
    keys = sorted(record["rubrics"])
    assert metrics["teacher/tasks_with_rubric"] == len(keys) == len(tasks)
    expected = paired_gain(success_by_task(own), success_by_task(none), keys)["mean"]
    assert metrics["teacher/gain"] == pytest.approx(expected)
    assert record["success"]["none"] == success_by_task(none)


def test_a_run_with_the_teacher_test_logs_it_each_evaluation(tmp_path):
    rubric_file = tmp_path / "rubrics.yaml"
    rubric_file.write_text(json.dumps({"*": RUBRIC}))
    config = load_config(
        None,
        [
            "model.name=tiny-random",
            f"env.id={GUESS}",
            "rollout.tasks_per_iteration=2",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=6",
            "rollout.action_format=last_line",
            "train.iterations=1",
            "eval.every=1",
            "eval.num_tasks=3",
            "probes.teacher.test=file",
            f"probes.teacher.rubric_file={rubric_file}",
            "train.threads=1",
            "logging.live=false",
            "logging.tensorboard=false",
            f"train.output_dir={tmp_path / 'run'}",
        ],
    )
    Trainer(config, callbacks=probes_for(config)).run()
    lines = [json.loads(line) for line in (tmp_path / "run" / "teacher.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [0, 1]
    for line in lines:
        assert set(line["success"]) == {"none", "own", "other"}
        assert set(line["success"]["own"]) == set(line["success"]["none"]) == set(line["rubrics"])
    evals = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert all(e["teacher/tasks_with_rubric"] == 3 and "teacher/gain_vs_other" in e for e in evals)


def test_other_tasks_rubrics_never_give_a_task_its_own():
    rubrics = {f"task{n}": [f"criterion of task {n}"] for n in range(7)}
    for seed in range(20):
        lent = other_tasks_rubrics(rubrics, seed)
        assert set(lent) == set(rubrics)
        assert all(lent[key] != rubrics[key] for key in rubrics)
        assert sorted(map(tuple, lent.values())) == sorted(map(tuple, rubrics.values()))  # each lent once
    assert other_tasks_rubrics({"only": ["x"]}, 0) == {}


def test_paired_gain_is_the_mean_task_difference_with_its_interval():
    gain = paired_gain({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 0.0, "b": 1.0, "c": 0.0}, ["a", "b", "c"])
    assert gain["mean"] == pytest.approx(1 / 3) and gain["n"] == 3
    # t(2) = 4.303, sd of (1, 0, 0) = 0.5774: half width 1.434, clipped to [-1, 1].
    assert gain["low"] == -1.0 and gain["high"] == 1.0
    metrics = training_teacher_metrics([{"with": 1.0, "without": 0.5}, {"with": 0.5, "without": 0.5}])
    assert metrics["teacher/train_gain"] == pytest.approx(0.25) and metrics["teacher/train_groups"] == 2
    assert metrics["teacher/train_success_with"] == 0.75 and metrics["teacher/train_success_without"] == 0.5


class PromptBlindPolicy:
    """Wins VowelEnv with probability ``p`` whatever its context says: each turn writes "aeiou"
    or "zzz" by a draw from the turn's sampling seed alone, so a rubric in context changes
    nothing it does (the tokenizer and chat template are tiny-random's)."""

    def __init__(self, policy, p: float) -> None:
        self.policy, self.p = policy, p

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def generate(self, contexts, params, *, sessions=None, seeds=None):
        texts = ["aeiou" if np.random.default_rng(seed).random() < self.p else "zzz" for seed in seeds]
        tokens = [self.policy.chat.end_of_turn_tokens(t) for t in texts]
        return [Completion(ids, [0.0] * len(ids), t, "eos") for ids, t in zip(tokens, texts, strict=True)]


@pytest.mark.parametrize(("p", "bias_sign"), [(0.9, 1), (0.2, -1)])
def test_train_gain_of_a_rubric_that_changes_nothing_is_zero(policy, p, bias_sign):
    """ORSD shapes only groups with mixed outcomes, so their own attempts are a biased baseline
    (with 4 attempts they win 0.71 on average at p = 0.9, 0.34 at p = 0.2); fresh episodes
    without the rubric, with the same seeds, are not."""
    blind = PromptBlindPolicy(policy, p=p)
    config = load_config(
        None,
        [
            f"env.id=resumable_env:{VOWELS}",
            "rollout.group_size=4",
            "rollout.max_turns=1",
            "rollout.action_format=last_line",
        ],
    )
    sampling = config.rollout.sampling(config.rollout.temperature, 3)
    tasks = [TaskSpec(seed=1000 + n) for n in range(80)]
    attempts = collect(VOWELS, blind, tasks, group_size=4, sampling=sampling, options=config.rollout)
    groups = [list(range(4 * n, 4 * n + 4)) for n in range(len(tasks))]
    mixed = [g for g in groups if 0 < sum(attempts[i].success for i in g) < 4]
    audit = [{"attempt_indices": g, "selected_rubric": ["writes vowels only"], "task_key": str(g[0])} for g in mixed]
    played = []

    def play(firsts, edit):
        played.append(teacher_episodes(VOWELS, blind, config, episodes=4, seed=11)(firsts, edit))
        return played[-1]

    pairs = training_teacher_pairs(play, attempts, audit, RubricContext())
    metrics = training_teacher_metrics(pairs)

    assert metrics["teacher/train_groups"] == len(mixed) >= 20
    assert metrics["teacher/train_gain_low"] <= 0.0 <= metrics["teacher/train_gain_high"]
    assert metrics["teacher/train_gain"] == 0.0  # common random numbers: every pair is equal
    assert metrics["teacher/train_success_without"] == pytest.approx(p, abs=0.1)
    with_rubric, without = played
    # Same tasks, reset seeds and sampling streams: the rubric is all that differs.
    assert [(t.task_id, t.seed, t.episode_id) for t in with_rubric] == [
        (t.task_id, t.seed, t.episode_id) for t in without
    ]
    assert all(t.extra.get("privileged_prompt") for t in with_rubric)
    assert not any(t.extra.get("privileged_prompt") for t in without)
    # The shaped groups' own attempts would read the same rubric as a gain (a loss at p = 0.2).
    own = [float(np.mean([attempts[i].success for i in g["attempt_indices"]])) for g in audit]
    biased = mean_ci([pair["with"] - o for pair, o in zip(pairs, own, strict=True)], (-1.0, 1.0))
    assert min(bias_sign * biased.low, bias_sign * biased.high) > 0.05


def test_the_expert_teacher_test_needs_the_expert_plan_on_the_eval_side():
    with pytest.raises(ConfigError, match="eval.env_kwargs.expert=reset"):
        check_probes(load_config("demo", ["probes.teacher.test=expert", "eval.env_kwargs={expert: false}"]))
    # The error names the setting that named the file (not ORSD's rubric_file).
    with pytest.raises(ConfigError, match=r"^probes.teacher.rubric_file: '/nonexistent.yaml' does not exist"):
        check_probes(load_config(None, ["probes.teacher.test=file", "probes.teacher.rubric_file=/nonexistent.yaml"]))
    check_probes(load_config("demo", ["probes.teacher.test=expert", "eval.env_kwargs={expert: reset}"]))


def test_a_trainer_refuses_probe_settings_no_callback_of_its_reads(tmp_path):
    config = load_config(None, ["model.name=tiny-random", "probes.teacher.test=expert"])
    with pytest.raises(ConfigError, match=r"probes.teacher: no probe of this run reads it"):
        Trainer(config)
    with pytest.raises(
        ConfigError, match=r"probes.teachr: no probe of this run reads it \(did you mean 'probes.teacher'"
    ):
        probes_for(load_config(None, ["probes.teachr.test=expert"]))


def test_training_teacher_episodes_change_no_training_number(tmp_path):
    """ORSD with the expert's rubric, with and without ``probes.teacher.episodes``: the same
    metrics but the teacher's own (its episodes draw from a seed stream of their own)."""
    runs = {}
    for episodes in (0, 2):
        config = load_config(
            None,
            [
                "model.name=tiny-random",
                f"env.id=resumable_env:{VOWELS}",
                "env.kwargs={expert: true}",
                "rollout.tasks_per_iteration=3",
                "rollout.group_size=3",
                "rollout.max_turns=1",
                "rollout.max_new_tokens=6",
                "rollout.action_format=last_line",
                "algo.name=orsd",
                # The vowel share as reward: every group's rewards are mixed, so every group is shaped.
                "algo.per_algo={grpo: {reward: {outcome: return}}, orsd: {rubric_source: expert, min_corr: -1.0}}",
                "train.iterations=2",
                "eval.every=0",
                "eval.num_tasks=1",
                f"probes.teacher.episodes={episodes}",
                "train.threads=1",
                "logging.live=false",
                "logging.tensorboard=false",
                f"train.output_dir={tmp_path / str(episodes)}",
            ],
        )
        Trainer(config, callbacks=probes_for(config)).run()
        lines = (tmp_path / str(episodes) / "metrics.jsonl").read_text().splitlines()
        runs[episodes] = [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]
    measured = [{k: v for k, v in r.items() if not k.startswith("teacher/")} for r in runs[2]]
    assert measured == runs[0]
    assert all(r["teacher/train_groups"] > 0 and "teacher/train_gain_low" in r for r in runs[2])


STUDIES = Path(__file__).resolve().parents[1] / "benchmarks" / "studies"
RECORDED_GATE = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "teacher_gate" / "gate.json"


@pytest.fixture
def teacher_gate(monkeypatch):
    """benchmarks/studies/teacher_gate.py as a module (it imports orsd_study.py beside it)."""
    monkeypatch.syspath_prepend(str(STUDIES))
    return importlib.import_module("teacher_gate")


def test_the_recorded_gate_selected_its_passing_cell_on_24_tasks_and_it_holds_on_the_other_72(teacher_gate):
    gate = json.loads(RECORDED_GATE.read_text())
    report = teacher_gate.gate_report(gate, [0, 1, 2])
    assert report["cells_tried"] == 10
    screened = set(gate["cells"]["rubric-48/system"]["success"]["none"])
    for name, cell in report["cells"].items():
        assert cell["seed"] == 0
        # The first command's eight cells were chosen on nothing; the second's on its 24 tasks.
        assert set(cell["selection_tasks"]) == (screened if "@96" in name else set())
    chosen = report["cells"]["rubric-48@96/system"]
    assert chosen["fresh_tasks"] == 72 and (chosen["won"], chosen["lost"]) == (7, 0)
    assert chosen["gain"]["mean"] == pytest.approx(7 / 72) and chosen["gain"]["low"] > 0
    assert chosen["verdict"] == "pass" and report["cells"]["plain-48@96/system"]["verdict"] == "fail"
    assert report["warm_starts"] == {
        "rubric-48/system": {"0": "pass (rubric-48@96/system)", "1": "not gated", "2": "not gated"}
    }


@pytest.mark.slow
def test_the_gate_gates_each_seeds_warm_start_and_judges_a_cell_on_tasks_it_was_not_chosen_on(tmp_path):
    tiny = [
        "model.name=tiny-random",
        "env.kwargs.generator={num_tasks: 16, max_receptacles: 2, num_distractors: 0}",
        f"env.kwargs.cache_dir={tmp_path / 'cache'}",
        "warm_start.epochs=1",
        "train.threads=1",
        "logging.tensorboard=false",
    ]

    def gate(*args: str) -> dict:
        command = [sys.executable, str(STUDIES / "teacher_gate.py"), "--settings", "plain-2", "--placements", "system"]
        out = ["--out", str(tmp_path / "out"), "--runs", str(tmp_path / "runs")]
        done = subprocess.run([*command, *args, *out, *tiny], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads((tmp_path / "out" / "gate.json").read_text())

    screen = ("--seeds", "0,1", "--eval-tasks", "2")
    gate(*screen)
    recorded = gate("--seeds", "0", "--eval-tasks", "4")
    cells = recorded["report"]["cells"]
    assert list(cells) == ["plain-2@2/system/seed0", "plain-2@2/system/seed1", "plain-2@4/system/seed0"]
    # Each seed trains and gates its own warm start, as the study's seeds do.
    warm = tmp_path / "runs" / "warm_start"
    assert (warm / "plain-2-seed0.safetensors").read_bytes() != (warm / "plain-2-seed1.safetensors").read_bytes()
    # The larger cell was chosen after the screen had played its first 2 tasks: its verdict is on the other 2.
    screened = set(recorded["cells"]["plain-2@2/system/seed0"]["success"]["none"])
    assert [cell["selection_tasks"] for cell in cells.values()] == [[], [], sorted(screened)]
    assert [cell["fresh_tasks"] for cell in cells.values()] == [2, 2, 2]
    text = (tmp_path / "out" / "gate.md").read_text()
    assert "3 cells tried in 2 commands" in text and "`plain-2@4/system/seed0` was selected on 2 of its 4 tasks" in text
    # The same command again continues it: nothing runs, and its cells stay chosen together.
    again = gate(*screen)
    assert again["cells"] == recorded["cells"] and len(again["runs"]) == 2 and len(again["runs"][0]["continued"]) == 1
