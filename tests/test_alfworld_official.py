"""ALFWorld on the official json_2.1.1 valid_seen games (read in place from ../shared/data)."""

from __future__ import annotations

import json
import re
from collections import Counter

import gymnasium as gym
import pytest
from contract import assert_info_contract

import orsd_gym  # noqa: F401
from orsd_gym.envs.alfworld import TASK_TYPES
from orsd_gym.envs.alfworld.expert import play_expert
from orsd_gym.envs.alfworld.logic import game_logic

ALF = "orsd_gym/ALFWorld-v0"
pytestmark = pytest.mark.official_data


@pytest.fixture(scope="session")
def valid_seen(alfworld_data):
    return alfworld_data


def test_lists_the_140_valid_seen_games(valid_seen):
    env = gym.make(ALF, split="valid_seen", data_dir=valid_seen)
    tasks = env.unwrapped.tasks
    assert len(tasks) == 140
    assert set(Counter(t.task_type for t in tasks)) == set(TASK_TYPES)
    assert tasks[0].goal == "look at alarmclock under the desklamp"
    trajs = valid_seen.glob("json_2.1.1/valid_seen/*/*/traj_data.json")
    expected = sum(json.loads(p.read_text())["task_type"] == "pick_two_obj_and_place" for p in trajs)
    only_two = gym.make(ALF, split="valid_seen", data_dir=valid_seen, task_types=["pick_two_obj_and_place"])
    assert len(only_two.unwrapped.tasks) == expected > 0
    assert {t.task_type for t in only_two.unwrapped.tasks} == {"pick_two_obj_and_place"}


def test_generated_wording_is_the_official_domain_and_grammar(valid_seen):
    logic = game_logic("2.1.1")
    for path in sorted(valid_seen.glob("json_2.1.1/valid_seen/*/*/game.tw-pddl"))[:10]:
        game = json.loads(path.read_text())
        assert game["pddl_domain"] == logic.domain
        grammar = re.sub(r'"Your task is to: [^"]*\."', '"Your task is to: UNKNOWN GOAL."', game["grammar"])
        assert grammar == logic.grammar


def test_expert_wins_a_sample_of_every_task_type(valid_seen):
    env = gym.make(ALF, split="valid_seen", data_dir=valid_seen, expert=True)
    tasks = env.unwrapped.tasks
    # The planner replans every step and costs seconds on big rooms: per type, the smallest game.
    sizes = [len(open(t.game_file).read()) for t in tasks]
    sample = [min((k for k, t in enumerate(tasks) if t.task_type == tt), key=sizes.__getitem__) for tt in TASK_TYPES]
    for task_id in sample:
        episode = play_expert(env, task_id)
        assert episode.won, episode
    env.close()


def test_official_observations_drop_artifacts_unless_raw(valid_seen):
    clean = gym.make(ALF, split="valid_seen", data_dir=valid_seen, expert=True)
    raw = gym.make(ALF, split="valid_seen", data_dir=valid_seen, expert=True, raw=True)
    obs, info = clean.reset(options={"task_id": 0})
    raw_obs, _ = raw.reset(options={"task_id": 0})
    assert_info_contract(info)
    assert obs.startswith("You are in the middle of a room.") and obs.endswith(
        "Your task is to: look at alarmclock under the desklamp."
    )
    assert raw_obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    action = info["expert_actions"][0]
    assert action.startswith("go to ")
    obs, *_ = clean.step(action)
    raw_obs, *_ = raw.step(action)
    assert re.match(r"^You arrive at loc \d+\. ", raw_obs) and raw_obs.endswith(obs) and "You arrive" not in obs
    assert clean.step("put alarmclock 1 in/on bed 9")[0] == "Nothing happens."
