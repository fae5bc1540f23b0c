"""Held-out evaluation by construction: the task plan of every env and every shipped config."""

from __future__ import annotations

import json

import pytest
from resumable_env import ENV_ID as VOWEL_ENV

from orsd_gym.configio import SHIPPED_CONFIGS
from orsd_gym.envs.alfworld.generator import is_held_out_floor_plan
from orsd_gym.errors import TaskPlanError
from orsd_gym.train.config import load_config
from orsd_gym.train.plan import build_task_plan, task_plan
from orsd_gym.train.trainer import Trainer

GUESS = ["env.id=orsd_gym/GuessNumber-v0", "rollout.tasks_per_iteration=4", "eval.num_tasks=4", "train.iterations=5"]


def _number(key: str) -> int:
    return int(key.rsplit("number-", 1)[1])


def test_guess_number_evaluates_only_held_out_numbers():
    plan = build_task_plan(load_config(None, GUESS))
    keys = plan.keys()
    assert sorted(_number(k) for k in keys["eval"]) == [5, 10, 15, 20]  # distinct: all four held-out numbers
    assert all(_number(k) % 5 != 0 for k in keys["train"])
    assert plan.overlap == [] and plan.summary()["eval_train_overlap"] == 0
    assert plan.train_kwargs == {"split": "train"} and plan.eval_kwargs == {"split": "eval"}
    assert plan.warnings == []


def test_eval_is_independent_of_the_training_seed_and_train_tasks_of_the_iteration():
    a = task_plan(load_config(None, [*GUESS, "train.seed=0"]))
    b = task_plan(load_config(None, [*GUESS, "train.seed=1"]))
    assert a["eval"] == b["eval"] and a["train"] != b["train"]
    assert len(a["train"]) == 5 * 4 and len(task_plan(load_config(None, GUESS), 2)["train"]) == 2 * 4


def test_too_few_held_out_tasks_fail_unless_repeats_are_asked_for():
    with pytest.raises(TaskPlanError, match="only 4 distinct"):
        build_task_plan(load_config(None, [*GUESS, "eval.num_tasks=6"]))
    plan = build_task_plan(load_config(None, [*GUESS, "eval.num_tasks=6", "eval.allow_repeats=true"]))
    assert len(plan.eval) == 6 and plan.summary()["eval_distinct"] == 4


def test_skipped_evaluation_tasks_are_the_prefix_another_run_played_and_never_played_again():
    wide = [*GUESS, "env.kwargs.high=100"]
    reserved = task_plan(load_config(None, [*wide, "eval.num_tasks=6"]))["eval"]
    plan = build_task_plan(load_config(None, [*wide, "eval.skip_tasks=4", "eval.num_tasks=2"]))
    # The same seeded order: a gate that played the first 4 and a study that skips them share none.
    assert [task.key for task in plan.eval] == reserved[4:6]
    assert [task.seed for task in plan.eval] == [1_000_004, 1_000_005]
    assert not set(reserved[:4]) & set(plan.keys()["eval"])
    with pytest.raises(TaskPlanError, match=r"after the 18 skipped \(eval.skip_tasks\)"):
        build_task_plan(load_config(None, [*wide, "eval.skip_tasks=18", "eval.num_tasks=4"]))


def test_eval_kwargs_pointing_back_at_training_tasks_are_refused():
    with pytest.raises(TaskPlanError, match="also training tasks"):
        build_task_plan(load_config(None, [*GUESS, "eval.env_kwargs={split: train}"]))
    with pytest.raises(TaskPlanError, match="train on split='train'"):
        build_task_plan(load_config(None, [*GUESS, "env.kwargs={split: eval}"]))


def test_evaluating_on_training_tasks_is_explicit_and_reported():
    plan = build_task_plan(load_config(None, [*GUESS, "eval.tasks=training"]))
    assert plan.eval_kwargs == plan.train_kwargs and plan.overlap
    assert any("not held out" in w for w in plan.warnings)


def test_a_user_env_without_a_partition_gets_one_and_a_warning():
    plan = build_task_plan(load_config(None, [f"env.id={VOWEL_ENV}", "eval.num_tasks=2"]))
    assert sorted(task.task_id for task in plan.eval) == [4, 9]
    assert all(task.task_id not in (4, 9) for tasks in plan.train for task in tasks)
    assert plan.warnings and "declares no training/held-out partition" in plan.warnings[0]


def test_generated_alfworld_evaluates_in_held_out_floor_plans():
    pytest.importorskip("textworld")
    config = load_config(
        None,
        [
            "env.id=orsd_gym/ALFWorld-v0",
            "env.kwargs.task_types=[pick_and_place_simple]",
            "env.kwargs.generator={num_tasks: 6, max_receptacles: 2, num_distractors: 0}",
            "eval.num_tasks=3",
            "rollout.tasks_per_iteration=2",
            "train.iterations=2",
            "warm_start.episodes=2",
        ],
    )
    plan = build_task_plan(config)
    assert plan.eval_kwargs["split"] == "generated_eval" and plan.train_kwargs["split"] == "generated"
    import gymnasium as gym

    for kwargs, tasks, held_out in (
        (plan.eval_kwargs, plan.eval, True),
        (plan.train_kwargs, [t for ts in plan.train for t in ts] + plan.warm_start, False),
    ):
        env = gym.make("orsd_gym/ALFWorld-v0", **kwargs)
        for task in tasks:
            scene = int(env.unwrapped.tasks[task.task_id].name.split("/")[0].rsplit("-", 1)[1])
            assert is_held_out_floor_plan(scene) == held_out, (task.key, scene)
        env.close()


def test_webshop_evaluates_on_test_goals_and_trains_on_the_rest():
    pytest.importorskip("spacy")
    plan = build_task_plan(
        load_config(None, ["env.id=orsd_gym/WebShop-v0", "eval.num_tasks=20", "warm_start.episodes=0"])
    )
    index = lambda key: int(key.rsplit("-", 1)[1])  # noqa: E731
    assert all(index(k) < 500 for k in plan.keys()["eval"])
    assert all(index(k) >= 500 for k in plan.keys()["train"])
    with pytest.raises(TaskPlanError, match="goal_split='train'"):
        build_task_plan(load_config(None, ["env.id=orsd_gym/WebShop-v0", "env.kwargs={goal_split: test}"]))


@pytest.mark.parametrize("name", sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml")))
def test_every_shipped_config_plans_disjoint_distinct_evaluation(name, request, monkeypatch):
    config = load_config(name)
    if config.env.id.endswith("ALFWorld-v0"):
        pytest.importorskip("textworld")
        if config.env.kwargs.get("split") == "train":  # official games
            monkeypatch.setenv("ALFWORLD_DATA", str(request.getfixturevalue("alfworld_data")))
    if config.env.id.endswith("WebShop-v0"):
        monkeypatch.setenv("WEBSHOP_DATA", str(request.getfixturevalue("shared_data") / "webshop"))
    summary = build_task_plan(config).summary()
    assert summary["eval_on"] == "held_out" and summary["eval_train_overlap"] == 0
    assert summary["eval_distinct"] == summary["eval_tasks"] == config.eval.num_tasks
    assert summary["warnings"] == []


def test_the_trainer_runs_exactly_its_plan(tmp_path):
    config = load_config(
        None,
        [
            "model.name=tiny-random",
            f"env.id={VOWEL_ENV}",
            "rollout.tasks_per_iteration=2",
            "rollout.group_size=2",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=4",
            "rollout.action_format=last_line",
            "eval.num_tasks=2",
            "eval.every=1",
            "train.iterations=2",
            "train.threads=1",
            f"train.output_dir={tmp_path}",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    Trainer(config).run()
    written = json.loads((tmp_path / "task_plan.json").read_text())
    assert written["keys"] == task_plan(config)
    assert written["summary"]["warnings"]  # the test env declares no partition: said in the run's record
    for iteration, tasks in enumerate(build_task_plan(config).train, start=1):
        lines = (tmp_path / "audit" / f"iter_{iteration:06d}" / "trajectories.jsonl").read_text().splitlines()
        played = [json.loads(line)["task_id"] for line in lines]
        assert played == [task.task_id for task in tasks for _ in range(2)]


def test_rl_training_never_draws_a_warm_start_demonstration_task_by_default():
    """GuessNumber has 16 training numbers: 6 demonstrations leave 10 for RL, and a run's
    training rooms are never the ones its policy was cloned in (unless asked for)."""
    cloned = [*GUESS, "warm_start.episodes=6", "warm_start.env_kwargs={}", "train.iterations=10"]
    plan = build_task_plan(load_config(None, cloned))
    keys = plan.keys()
    assert len(set(keys["warm_start"])) == 6 and not set(keys["warm_start"]) & set(keys["train"])
    assert plan.train_pool == 10 and plan.summary()["warm_start_train_overlap"] == 0
    shared = build_task_plan(load_config(None, [*cloned, "warm_start.disjoint_from_training=false"]))
    assert shared.summary()["warm_start_train_overlap"] > 0 and shared.train_pool == 16
    with pytest.raises(TaskPlanError, match="use all 16 training task"):
        build_task_plan(load_config(None, [*GUESS, "warm_start.episodes=40", "warm_start.env_kwargs={}"]))


def test_runs_sharing_one_seeds_warm_start_plan_its_demonstrations_and_train_on_none_of_them():
    shared = [*GUESS, "warm_start.episodes=6", "warm_start.env_kwargs={}", "warm_start.seed=0"]
    own = build_task_plan(load_config(None, [*shared, "train.seed=0"])).keys()["warm_start"]
    for seed in (1, 2, 3):
        plan = build_task_plan(load_config(None, [*shared, f"train.seed={seed}"])).keys()
        assert plan["warm_start"] == own and not set(own) & set(plan["train"])
    # Without it each seed's plan names its own demonstrations: another draw.
    assert build_task_plan(load_config(None, [*shared[:-1], "train.seed=1"])).keys()["warm_start"] != own


def test_a_run_recorded_before_disjoint_warm_starts_is_read_as_sharing_its_tasks(tmp_path):
    """A saved run that lacks the setting trained on its demonstration tasks: it is compared as
    such, so a comparison with today's default does not take it for one of its own runs."""
    from orsd_gym.train.config import default_record, run_record
    from orsd_gym.train.rundir import config_differences

    record = run_record(load_config(None, GUESS))
    saved = {**record, "warm_start": {k: v for k, v in record["warm_start"].items() if k != "disjoint_from_training"}}
    differences = config_differences(saved, record, default_record("grpo"))
    assert differences == {"warm_start.disjoint_from_training": (False, True)}
