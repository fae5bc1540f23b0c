"""Expert rubric bundles: criteria restating the env expert's plan, naming the task's things."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest

import orsd_gym  # noqa: F401
from orsd_gym.algos.orsd.expert_rubric import expert_bundle, expert_bundle_for
from orsd_gym.errors import MissingExpertPlanError
from orsd_gym.rollout.trajectory import Trajectory

EASY_ROOMS = {"num_tasks": 2, "max_receptacles": 2, "num_distractors": 0}
#: Each env reads its own expert's plans (`TextEnv.expert_criteria`); GuessNumber says nothing: generic criteria.
ALFWORLD, WEBSHOP, GUESS = "orsd_gym/ALFWorld-v0", "orsd_gym/WebShop-v0", "orsd_gym/GuessNumber-v0"


@pytest.fixture(scope="module")
def alfworld_reset(tmp_path_factory):
    pytest.importorskip("textworld")
    env = gym.make(
        "orsd_gym/ALFWorld-v0",
        expert="reset",
        generator=EASY_ROOMS,
        task_types=["pick_and_place_simple"],
        cache_dir=str(tmp_path_factory.mktemp("alf_cache")),
        recycle_after=None,
    )
    infos = [env.reset(options={"task_id": k})[1] for k in range(2)]
    env.close()
    return infos


def test_alfworld_bundle_names_the_tasks_objects_and_receptacles(alfworld_reset):
    for info in alfworld_reset:
        plan = info["expert_actions"]
        take = next(re.match(r"^take (.+) from (.+)$", a) for a in plan if a.startswith("take "))
        put = next(re.match(r"^put (.+) in/on (.+)$", a) for a in plan if a.startswith("put "))
        thing, source, target = take[1], take[2], put[2]
        bundle = expert_bundle(ALFWORLD, plan, max_criteria=4)
        assert bundle == [
            f"Goes to {source} first",
            f"Takes the {thing} from {source}",
            f"Takes the {thing} before going to {target}",
            f"Puts the {thing} in/on {target}",
        ]
        # The task names the object and the receptacle type ("put some pillow on armchair").
        noun, receptacle = thing.split()[0], target.split()[0]
        assert noun in info["task"] and receptacle in info["task"]
        # Fewer criteria keep the take, the put and the order; never the first "go to" alone.
        assert expert_bundle(ALFWORLD, plan, max_criteria=3) == bundle[1:]
        assert expert_bundle(ALFWORLD, plan, max_criteria=1) == [f"Takes the {thing} from {source}"]


def test_alfworld_transformations_and_two_objects():
    heat = [
        "go to fridge 1",
        "open fridge 1",
        "take mug 1 from fridge 1",
        "go to microwave 1",
        "heat mug 1 with microwave 1",
        "go to countertop 1",
        "put mug 1 in/on countertop 1",
    ]
    assert expert_bundle(ALFWORLD, heat, 3) == [
        "Takes the mug 1 from fridge 1",
        "Heats the mug 1 with microwave 1",
        "Puts the mug 1 in/on countertop 1",
    ]
    look = ["go to dresser 1", "take pencil 1 from dresser 1", "go to sidetable 1", "use desklamp 1"]
    assert "Uses the desklamp 1 while holding the pencil 1" in expert_bundle(ALFWORLD, look, 3)
    two = [
        "go to drawer 1",
        "take knife 2 from drawer 1",
        "go to countertop 1",
        "put knife 2 in/on countertop 1",
        "go to drawer 1",
        "take knife 1 from drawer 1",
        "go to countertop 1",
        "put knife 1 in/on countertop 1",
    ]
    assert expert_bundle(ALFWORLD, two, 3)[-1] == "Puts the knife 2 and the knife 1 in/on countertop 1"
    wheel = ["go to sofa 1", "take pillow 1 from sofa 1", "go to armchair 1", "move pillow 1 to armchair 1"]
    assert expert_bundle(ALFWORLD, wheel, 3)[-1] == "Puts the pillow 1 in/on armchair 1"


def test_webshop_bundle_from_the_envs_reset_plan(monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    env = gym.make("orsd_gym/WebShop-v0", expert="reset")
    _, info = env.reset(options={"goal_index": 0})
    goal = env.unwrapped.goals[0]
    bundle = expert_bundle("orsd_gym/WebShop-v0", info["expert_actions"], max_criteria=4)
    first_words = " ".join(goal["instruction_text"].split()[:3])
    assert bundle[0].startswith(f'Searches for "{first_words}')
    assert bundle[1] == f"Opens product {goal['asin'].upper()}"
    values = ", ".join(goal["goal_options"].values())
    assert bundle[2:] == ([f"Selects the options {values}"] if values else []) + [
        "Buys the product it opened" + (" after selecting its options" if values else "")
    ]


def test_webshop_paging_and_priorities():
    plan = [
        "search[red shoes]",
        "click[next >]",
        "click[next >]",
        "click[b01abcdefg]",
        "click[red]",
        "click[8]",
        "click[buy now]",
    ]
    assert expert_bundle(WEBSHOP, plan, 4) == [
        'Searches for "red shoes"',
        "Opens product B01ABCDEFG (on results page 3)",
        "Selects the options red, 8",
        "Buys the product it opened after selecting its options",
    ]
    assert expert_bundle(WEBSHOP, plan, 2) == [
        "Opens product B01ABCDEFG (on results page 3)",
        "Selects the options red, 8",
    ]


def test_generic_plans_and_edge_cases():
    plan = ["guess 50", "guess 25", "guess 37", "guess 31", "guess 34"]
    assert expert_bundle(GUESS, plan, 3) == [
        'Does "guess 50"',
        'Does "guess 34"',
        'Does "guess 50" before "guess 34"',
    ]
    assert expert_bundle(GUESS, plan, 1) == ['Does "guess 34"']
    assert expert_bundle(GUESS, plan[:2], 5) == ['Does "guess 50"', 'Does "guess 25"']
    assert expert_bundle(GUESS, [], 3) == []
    with pytest.raises(ValueError, match="max_criteria"):
        expert_bundle(GUESS, plan, 0)


def test_bundle_from_a_trajectory_needs_the_reset_plan():
    def trajectory(infos):
        return Trajectory(
            token_ids=[],
            loss_mask=[],
            logprobs=[],
            spans=[],
            rewards=[],
            infos=infos,
            model_turns=[],
            actions=[],
            observations=[],
            task="put some pillow on armchair",
            prompt_messages=[],
            env_id="orsd_gym/ALFWorld-v0",
            task_id=3,
            seed=0,
            group_id=0,
            episode_id=0,
        )

    plan = ["go to sofa 1", "take pillow 1 from sofa 1", "go to armchair 1", "put pillow 1 in/on armchair 1"]
    assert expert_bundle_for(trajectory([{"expert_actions": plan}]), 2) == [
        "Takes the pillow 1 from sofa 1",
        "Puts the pillow 1 in/on armchair 1",
    ]
    with pytest.raises(MissingExpertPlanError, match="expert='reset'"):
        expert_bundle_for(trajectory([{"task": "x"}]), 2)
