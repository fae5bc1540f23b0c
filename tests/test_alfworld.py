"""ALFWorld on the real engine, generated tasks (no download needed)."""

from __future__ import annotations

import json
import re
import sys

import gymnasium as gym
import pytest
from contract import (
    assert_seed_determinism,
    assert_spaces_and_checker,
    assert_task_id_option,
    fuzz_invalid_actions_are_noops,
)

import orsd_gym  # noqa: F401
from orsd_gym.envs.alfworld import TASK_TYPES, GeneratorConfig
from orsd_gym.envs.alfworld.expert import play_expert
from orsd_gym.envs.alfworld.pool import GeneratedTaskPool
from orsd_gym.errors import ALFWorldDataNotFoundError, UnknownTaskTypeError

ALF = "orsd_gym/ALFWorld-v0"
# Small rooms keep the planner fast; 2 tasks per type (task k has type TASK_TYPES[k % 6]).
SMALL = {"num_tasks": 12, "max_receptacles": 4, "num_distractors": 2, "seed": 0}
ROOM_INTRO = re.compile(
    r"^You are in the middle of a room\. Looking quickly around you, you see "
    r"(a [a-z]+ \d+, )*(and )?a [a-z]+ \d+\.\n\nYour task is to: .+\.$"
)
GOAL_WORDING = {
    "pick_and_place_simple": re.compile(r"^put (a|some) [a-z]+ (in|on) [a-z]+$"),
    "look_at_obj_in_light": re.compile(r"^(look at [a-z]+ under the desklamp|examine the [a-z]+ with the desklamp)$"),
    "pick_clean_then_place_in_recep": re.compile(r"^(put a clean [a-z]+ in|clean some [a-z]+ and put it in) [a-z]+$"),
    "pick_heat_then_place_in_recep": re.compile(r"^(put a hot [a-z]+ in|heat some [a-z]+ and put it in) [a-z]+$"),
    "pick_cool_then_place_in_recep": re.compile(r"^(put a cool [a-z]+ in|cool some [a-z]+ and put it in) [a-z]+$"),
    "pick_two_obj_and_place": re.compile(r"^(put two [a-z]+ in|find two [a-z]+ and put them in) [a-z]+$"),
}


@pytest.fixture(scope="session")
def alf_cache(tmp_path_factory):
    """One generated-task cache for the whole session (generation runs once per task)."""
    return str(tmp_path_factory.mktemp("orsd_gym_cache"))


def make(alf_cache, **kwargs):
    kwargs.setdefault("generator", SMALL)
    kwargs.setdefault("recycle_after", None)  # in-process: no worker start-up per test env
    return gym.make(ALF, cache_dir=alf_cache, **kwargs)


def test_generated_env_passes_the_contract(alf_cache):
    env = make(alf_cache)
    assert len(env.unwrapped.tasks) == SMALL["num_tasks"]
    assert_spaces_and_checker(env)
    assert_task_id_option(env)
    assert_seed_determinism(lambda: make(alf_cache))
    fuzz_invalid_actions_are_noops(env)
    env.close()


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_wins_every_generated_task_type(alf_cache, task_type):
    env = make(alf_cache, expert=True)
    first = TASK_TYPES.index(task_type)
    for task_id in (first, first + 6):  # two seeds of each type
        obs, info = env.reset(options={"task_id": task_id})
        assert info["task_type"] == task_type
        assert ROOM_INTRO.match(obs), obs
        assert obs.endswith(f"Your task is to: {info['task']}.")
        assert GOAL_WORDING[task_type].match(info["task"]), info["task"]
        episode = play_expert(env, task_id)
        assert episode.won, episode
        assert episode.steps == len(info["expert_actions"])
    env.close()


def test_expert_episode_reads_like_alfworld(alf_cache):
    env = make(alf_cache, expert=True)
    obs, info = env.reset(options={"task_id": 2})  # a clean task: go, take, clean, put
    assert {"inventory", "look"} <= set(info["admissible_actions"])
    for action in list(info["expert_actions"]):
        assert action in info["admissible_actions"]
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["is_valid_action"]
        assert "You arrive at" not in obs
        if action.startswith("go to "):
            place = action[len("go to ") :]
            assert obs.startswith((f"On the {place}, you see", f"The {place} is")), obs
        elif action.startswith("take "):
            assert re.match(r"^You pick up the [a-z]+ \d+ from the [a-z]+ \d+\.$", obs), obs
        elif action.startswith("clean "):
            assert re.match(r"^You clean the [a-z]+ \d+ using the sinkbasin \d+\.$", obs), obs
        elif action.startswith("put "):
            assert re.match(r"^put [a-z]+ \d+ in/on [a-z]+ \d+$", action)
            assert re.match(r"^You put the [a-z]+ \d+ in/on the [a-z]+ \d+\.$", obs), obs
    assert (reward, terminated, info["won"]) == (1.0, True, True)
    env.close()


def test_invalid_actions_change_nothing(alf_cache):
    env = make(alf_cache, expert=True)
    obs0, info0 = env.reset(options={"task_id": 0})
    for bad in ["", "go to the moon", "take everything", "put  in ", "x" * 10_000, "démarrer ☃"]:
        obs, reward, terminated, truncated, info = env.step(bad)
        assert obs == "Nothing happens."
        assert info["is_valid_action"] is False and reward == 0.0 and not terminated
        assert info["admissible_actions"] == info0["admissible_actions"]
        assert info["expert_actions"] == info0["expert_actions"]
    obs, _, _, _, info = env.step("  " + info0["expert_actions"][0] + " ")  # surrounding spaces are fine
    assert info["is_valid_action"] and info["expert_actions"] == info0["expert_actions"][1:]
    env.close()


def test_step_budget_truncates_at_50(alf_cache):
    env = make(alf_cache)
    env.reset(seed=0)
    for step in range(50):
        _, _, terminated, truncated, _ = env.step("look")
        assert not terminated and truncated == (step == 49)
    env.close()


def test_raw_keeps_the_banner(alf_cache):
    env = make(alf_cache, raw=True)
    obs, _ = env.reset(options={"task_id": 0})
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    env.close()


def test_generation_is_deterministic_and_cached(tmp_path, monkeypatch):
    config = GeneratorConfig(num_tasks=3, max_receptacles=3, num_distractors=1, seed=5)
    first = GeneratedTaskPool(config, TASK_TYPES, tmp_path / "a")
    second = GeneratedTaskPool(config, TASK_TYPES, tmp_path / "b")
    for k in range(3):
        assert json.load(open(first[k].game_file)) == json.load(open(second[k].game_file))
        assert json.load(open(first[k].game_file))["solvable"] is True
    other_seed = GeneratedTaskPool(
        GeneratorConfig(num_tasks=3, max_receptacles=3, num_distractors=1, seed=6), TASK_TYPES, tmp_path / "a"
    )
    assert [t.game_file for t in other_seed] != [t.game_file for t in first]
    # A fresh pool on the same cache reads the files: generating would fail here.
    import orsd_gym.envs.alfworld.pool as pool_module

    monkeypatch.setattr(pool_module, "sample_task", lambda *a, **k: pytest.fail("regenerated a cached task"))
    again = GeneratedTaskPool(config, TASK_TYPES, tmp_path / "a")
    assert [t.goal for t in again] == [t.goal for t in first]
    for pool in (first, second, other_seed):
        pool.close()


def test_cache_dir_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("ORSD_GYM_CACHE", str(tmp_path / "from_env"))
    pool = GeneratedTaskPool(
        GeneratorConfig(num_tasks=1, max_receptacles=3, num_distractors=0), ("pick_and_place_simple",)
    )
    assert pool[0].game_file.startswith(str(tmp_path / "from_env"))
    pool.close()


def test_difficulty_knobs_shape_the_room(alf_cache, tmp_path):
    easy = make(
        alf_cache,
        task_types=["pick_and_place_simple"],
        generator={"num_tasks": 3, "max_receptacles": 2, "num_distractors": 0},
    )
    hard = make(
        alf_cache,
        task_types=["pick_and_place_simple"],
        generator={"num_tasks": 3, "max_receptacles": 12, "num_distractors": 10},
    )
    for k in range(3):
        easy_obs, _ = easy.reset(options={"task_id": k})
        hard_obs, _ = hard.reset(options={"task_id": k})
        easy_n = len(re.findall(r"\ba [a-z]+ \d+", easy_obs.split("\n")[0]))
        hard_n = len(re.findall(r"\ba [a-z]+ \d+", hard_obs.split("\n")[0]))
        assert easy_n == 2 and hard_n > easy_n, (easy_obs, hard_obs)
    assert {t.task_type for t in easy.unwrapped.tasks} == {"pick_and_place_simple"}
    easy.close()
    hard.close()


def test_wheel_wording(alf_cache):
    env = make(
        alf_cache,
        expert=True,
        task_types=["pick_and_place_simple"],
        generator={**SMALL, "num_tasks": 1, "wording": "wheel"},
    )
    _, info = env.reset(options={"task_id": 0})
    assert re.match(r"^move [a-z]+ \d+ to [a-z]+ \d+$", info["expert_actions"][-1])
    assert "help" in info["admissible_actions"]  # the wheel grammar's extra action
    assert play_expert(env, 0).won
    env.close()


def test_bad_arguments_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="split"):
        gym.make(ALF, split="test")
    with pytest.raises(UnknownTaskTypeError, match="pick_and_place_simple"):
        gym.make(ALF, task_types=["pick_and_juggle"])
    with pytest.raises(ValueError, match="unknown generator option"):
        gym.make(ALF, generator={"rooms": 3})
    with pytest.raises(ValueError, match="wording"):
        gym.make(ALF, generator={"wording": "ancient"})
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(ALFWorldDataNotFoundError, match="alfworld-download"):
        gym.make(ALF, split="valid_seen")
    with pytest.raises(ALFWorldDataNotFoundError, match=re.escape(str(tmp_path / "json_2.1.1" / "valid_seen"))):
        gym.make(ALF, split="valid_seen", data_dir=tmp_path)


def test_worker_process_is_recycled_and_keeps_playing(alf_cache):
    env = make(alf_cache, expert=True, recycle_after=2)
    episodes = [play_expert(env, k) for k in range(5)]
    assert all(e.won for e in episodes)
    assert env.unwrapped._engine.recycled == 2  # 5 games, 2 per worker: 3 workers
    _, info = env.reset(options={"task_id": 4})  # same game again: no new load, same worker
    assert env.unwrapped._engine.recycled == 2 and info["admissible_actions"]
    env.close()


def test_loading_a_game_keeps_sys_argv(alf_cache):
    saved = list(sys.argv)
    env = make(alf_cache)
    env.reset(seed=1)
    assert sys.argv == saved
    env.close()


def test_make_vec_async_steps_two_envs_in_parallel(alf_cache):
    kwargs = {"cache_dir": alf_cache, "generator": SMALL, "expert": True}
    envs = gym.make_vec(ALF, num_envs=2, vectorization_mode="async", **kwargs)
    try:
        obs, infos = envs.reset(seed=[0, 1])
        assert len(obs) == 2 and all(o.startswith("You are in the middle of a room") for o in obs)
        expected = [make(alf_cache, recycle_after=None).reset(seed=s)[1]["task_id"] for s in (0, 1)]
        assert list(infos["task_id"]) == expected
        first_action = infos["expert_actions"][0][0]
        obs, rewards, terminated, truncated, infos = envs.step([first_action, "fly away"])
        assert obs[1] == "Nothing happens." and not obs[0].startswith("Nothing happens")
        assert list(infos["is_valid_action"]) == [True, False]
        assert all(isinstance(a, list) and a for a in infos["admissible_actions"])
        assert all(isinstance(t, str) and t for t in infos["task"]) and not any(infos["won"])
    finally:
        envs.close()


@pytest.mark.parametrize("recycle_after", [None, 2])
def test_expert_reset_mode_plans_at_reset_only(alf_cache, recycle_after):
    replanning = make(alf_cache, expert=True)
    at_reset = make(alf_cache, expert="reset", recycle_after=recycle_after)
    for task_id in (0, 3):
        _, full_info = replanning.reset(options={"task_id": task_id})
        _, info = at_reset.reset(options={"task_id": task_id})
        plan = info["expert_actions"]
        assert plan and plan == full_info["expert_actions"]
        for action in plan:
            _, reward, terminated, _, info = at_reset.step(action)
            assert "expert_actions" not in info
        assert terminated and reward == 1.0 and info["won"]
        _, _, _, _, info = replanning.step(plan[0])
        assert info["expert_actions"] == plan[1:]  # expert=True still replans every step
    with pytest.raises(ValueError, match="expert="):
        make(alf_cache, expert="every step")
    replanning.close()
    at_reset.close()
