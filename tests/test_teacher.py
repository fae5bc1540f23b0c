"""The teacher test: the same held-out tasks and seeds played with and without a rubric in context."""

from __future__ import annotations

import json

import pytest

from orsd_gym.errors import ConfigError
from orsd_gym.policies.base import SamplingParams
from orsd_gym.rollout.collector import TaskSpec, collect
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.train.config import load_config
from orsd_gym.train.teacher import (
    RubricContext,
    other_tasks_rubrics,
    paired_gain,
    success_by_task,
    teacher_test,
    training_teacher_metrics,
)
from orsd_gym.train.trainer import Trainer

GUESS = "orsd_gym/GuessNumber-v0"
RUBRIC = ["guesses the middle of the range first", "halves the range after every reply"]


def test_teacher_test_plays_both_arms_on_the_same_tasks_and_seeds(policy, tmp_path):
    rubric_file = tmp_path / "rubrics.yaml"
    rubric_file.write_text("'*':\n" + "".join(f"  - {c}\n" for c in RUBRIC))
    options = RolloutOptions(max_turns=2, action_format="last_line")
    sampling = SamplingParams(max_new_tokens=6)
    tasks = [TaskSpec(seed=100 + n) for n in range(3)]
    played = []

    def play(edit=None):
        trajectories = collect(
            GUESS, policy, tasks, group_size=2, sampling=sampling, options=options, seed=7, edit_prompt=edit
        )
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
            "eval.teacher_test=file",
            f"eval.teacher_rubric_file={rubric_file}",
            "train.threads=1",
            "logging.live=false",
            "logging.tensorboard=false",
            f"train.output_dir={tmp_path / 'run'}",
        ],
    )
    Trainer(config).run()
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


def test_the_expert_teacher_test_needs_the_expert_plan_on_the_eval_side():
    with pytest.raises(ConfigError, match="eval.env_kwargs.expert=reset"):
        load_config("demo", ["eval.teacher_test=expert", "eval.env_kwargs={expert: false}"])
    with pytest.raises(ConfigError, match="eval.teacher_rubric_file"):
        load_config(None, ["eval.teacher_test=file", "eval.teacher_rubric_file=/nonexistent.yaml"])
    load_config("demo", ["eval.teacher_test=expert", "eval.env_kwargs={expert: reset}"])
