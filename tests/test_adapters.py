"""reasoning-gym datasets and TextArena games on the orsd-gym contract: the contract checks, the
scores against each library's own scorer on scripted episodes, the held-out split the task plan
proves, and a tiny GRPO/ORSD comparison on each."""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys

import gymnasium as gym
import pytest
from contract import (
    assert_info_contract,
    assert_seed_determinism,
    assert_spaces_and_checker,
    assert_task_id_option,
    fuzz_invalid_actions_are_noops,
)

import orsd_gym  # noqa: F401
from orsd_gym.envs import registered_text_envs
from orsd_gym.envs.adapters.common import is_held_out
from orsd_gym.errors import TaskPlanError, TaskSplitError
from orsd_gym.train.config import load_config
from orsd_gym.train.plan import build_task_plan

reasoning_gym = pytest.importorskip("reasoning_gym")
textarena = pytest.importorskip("textarena")

RG = "orsd_gym/ReasoningGym-v0"
TA = "orsd_gym/TextArena-v0"
#: Small pools keep the tests quick (the defaults draw 500 questions and 100 games).
RG_KWARGS = {"dataset": "chain_sum", "size": 60}
TA_KWARGS = {"game": "GuessTheNumber-v0", "size": 40}


def test_orsd_gym_envs_lists_the_adapters():
    ids = subprocess.run(
        [sys.executable, "-m", "orsd_gym.cli", "envs", "--ids"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert RG in ids and TA in ids
    described = {info.env_id: info.description for info in registered_text_envs()}
    assert "not installed" not in described[RG] + described[TA]


# ---------------------------------------------------------------------------- reasoning-gym
def test_reasoning_gym_contract():
    env = gym.make(RG, **RG_KWARGS)
    assert_spaces_and_checker(env)
    assert_task_id_option(env)
    assert_seed_determinism(lambda: gym.make(RG, **RG_KWARGS))
    fuzz_invalid_actions_are_noops(env, max_examples=20)


@pytest.mark.parametrize("dataset", ["chain_sum", "spell_backward", "letter_counting", "word_sorting", "gcd"])
def test_reasoning_gym_scores_are_the_datasets_own(dataset):
    """Scripted answers (right, right in reasoning-gym's answer tag, partly right, wrong, empty):
    the env's reward is what the dataset's own scorer gives, and it is won at 1.0."""
    env = gym.make(RG, dataset=dataset, size=30)
    library = reasoning_gym.create_dataset(dataset, seed=0, size=30)
    by_question = {library[i]["question"]: library[i] for i in range(30)}
    for task_id in range(min(6, len(env.unwrapped.tasks))):
        _, info = env.reset(options={"task_id": task_id})
        entry = by_question[info["task"]]
        answers = {
            entry["answer"]: entry["answer"],
            f"I think so.\n<answer>{entry['answer']}</answer>": entry["answer"],
            f"{entry['answer']} or maybe 7": f"{entry['answer']} or maybe 7",
            "wrong": "wrong",
            "": "",
        }
        for action, answer in answers.items():
            env.reset(options={"task_id": task_id})
            _, reward, terminated, _, info = env.step(action)
            expected = library.score_answer(answer, entry)
            assert reward == pytest.approx(expected) and info["score"] == reward, (action, entry)
            assert terminated and info["won"] == (expected >= 1.0)
        assert env.step("again")[4]["is_valid_action"] is False  # after the answer: a defined outcome


def test_reasoning_gym_config_and_errors():
    easy = gym.make(RG, dataset="chain_sum", size=10, config={"min_terms": 2, "max_terms": 2})
    assert all(task["question"].count("+") + task["question"].count(" - ") == 1 for task in easy.unwrapped.tasks)
    with pytest.raises(ValueError, match="choose one of: .*chain_sum"):
        gym.make(RG, dataset="chainsum")
    with pytest.raises(ValueError, match="needs dataset=NAME"):
        gym.make(RG)
    with pytest.raises(ValueError, match="does not fit"):
        gym.make(RG, dataset="chain_sum", config={"no_such_field": 1})


# ---------------------------------------------------------------------------- TextArena
def test_textarena_contract():
    env = gym.make(TA, **TA_KWARGS)
    assert_spaces_and_checker(env)
    assert_task_id_option(env)
    assert_seed_determinism(lambda: gym.make(TA, **TA_KWARGS))
    fuzz_invalid_actions_are_noops(env, max_examples=30)


def _play(env: gym.Env, task_id: int, script, limit: int = 60) -> tuple[int, list[str], dict, float]:
    """Play task ``task_id`` with ``script()(observation, step)`` until it ends; (seed, actions,
    last info, return)."""
    observation, info = env.reset(options={"task_id": task_id})
    seed = env.unwrapped.tasks[task_id][0]
    choose = script()
    actions, total = [], 0.0
    for step in range(limit):
        action = choose(observation, step)
        actions.append(action)
        observation, reward, terminated, truncated, info = env.step(action)
        assert_info_contract(info, step=True)
        total += reward
        if terminated or truncated:
            break
    return seed, actions, info, total


def _library_reward(game: str, seed: int, actions: list[str]) -> float | None:
    """The same moves played in TextArena itself (its own `make`, wrappers and scoring)."""
    env = textarena.make(game)
    env.reset(num_players=1, seed=seed)
    for action in actions:
        done, _ = env.step(action)
        if done:
            rewards, _ = env.close()
            return float(rewards[0])
    return None


def _binary_search():
    """Guess the middle of what the game's hints leave (1..20): always solves within 5 guesses."""
    bounds = [1, 20]
    guess = [0]

    def choose(observation: str, step: int) -> str:
        if "higher" in observation:
            bounds[0] = guess[0] + 1
        elif "lower" in observation:
            bounds[1] = guess[0] - 1
        guess[0] = (bounds[0] + bounds[1]) // 2
        return f"[{guess[0]}]"

    return choose


#: Distinct Mastermind guesses, in a fixed order.
CODES = list(itertools.permutations(range(1, 7), 4))


def _fixed(moves):
    return lambda: lambda observation, step: moves(step)


SCRIPTS = {
    "GuessTheNumber-v0": _binary_search,
    "TowerOfHanoi-v0": _fixed(lambda step: ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"][step]),
    # A rejected move between accepted ones (TextArena ends a game only after two in a row).
    "Mastermind-v0": _fixed(lambda step: "[1 2 3]" if step % 2 else "[{} {} {} {}]".format(*CODES[step // 2])),
    "LightsOut-v0": _fixed(lambda step: f"[{step % 5} {(2 * step) % 5}]"),
}


@pytest.mark.parametrize("game", sorted(SCRIPTS))
def test_textarena_scripted_scores_are_the_games_own(game):
    env = gym.make(TA, game=game, size=10)
    for task_id in range(min(3, len(env.unwrapped.tasks))):
        seed, actions, info, total = _play(env, task_id, SCRIPTS[game], limit=100)
        expected = _library_reward(game, seed, actions)
        assert expected is not None, "the scripted game ends in TextArena too"
        assert total == info["score"] == pytest.approx(expected)
        assert info["won"] == (expected >= 1.0)
    if game in ("GuessTheNumber-v0", "TowerOfHanoi-v0"):
        assert info["won"]


@pytest.mark.parametrize("game", ["GuessTheNumber-v0", "FrozenLake-v0", "TowerOfHanoi-v0"])
def test_textarena_admissible_moves_are_accepted_and_scored_as_the_game_does(game):
    env = gym.make(TA, game=game, size=10)
    rng = random.Random(0)
    for task_id in range(len(env.unwrapped.tasks)):
        _, info = env.reset(options={"task_id": task_id})
        seed, actions, total = env.unwrapped.tasks[task_id][0], [], 0.0
        for _ in range(40):
            assert info["admissible_actions"]
            actions.append(rng.choice(info["admissible_actions"]))
            _, reward, terminated, _, info = env.step(actions[-1])
            assert info["is_valid_action"], actions
            total += reward
            if terminated:
                assert total == pytest.approx(_library_reward(game, seed, actions))
                break


def test_textarena_invalid_moves_get_the_games_feedback_and_never_end_the_game():
    env = gym.make(TA, **TA_KWARGS)
    env.reset(options={"task_id": 0})
    for _ in range(5):  # TextArena itself would end the game at the second
        observation, reward, terminated, _, info = env.step("no brackets here")
        assert "You attempted an invalid move. Reason: Invalid move format" in observation
        assert (reward, terminated, info["is_valid_action"]) == (0.0, False, False)


def test_textarena_games_keep_their_own_random_state():
    outside = random.getstate()
    env = gym.make(TA, game="FrozenLake-v0-random", size=5)
    env.reset(seed=3)
    env.step("[down]")
    assert random.getstate() == outside


def test_textarena_errors_list_the_games():
    with pytest.raises(ValueError, match="choose one of: .*GuessTheNumber-v0"):
        gym.make(TA, game="Chess-v0")
    with pytest.raises(ValueError, match="needs game=ID"):
        gym.make(TA)


def test_every_listed_textarena_game_plays_offline_with_stable_task_keys():
    """Each game class of the list starts, takes a move and names its tasks the same way in a
    fresh process with another hash seed (so task keys are the same in every run)."""
    from orsd_gym.envs.adapters.textarena_env import game_ids

    code = (
        "import json, sys, gymnasium as gym, orsd_gym\n"
        "from orsd_gym.envs.adapters.textarena_env import _registry, _game_class\n"
        "keys, seen = {}, set()\n"
        "for game in json.loads(sys.argv[1]):\n"
        "    family = _game_class(_registry()[game].entry_point)\n"
        "    if family in seen: continue\n"
        "    seen.add(family)\n"
        "    env = gym.make('orsd_gym/TextArena-v0', game=game, size=2)\n"
        "    env.reset(options={'task_id': 0}); env.step('[1]')\n"
        "    keys[game] = [env.unwrapped.task_key(i) for i in range(len(env.unwrapped.tasks))]\n"
        "print(json.dumps(keys))\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code, json.dumps(game_ids())],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    keys = json.loads(runs[0])
    assert len(keys) == 22 and keys == json.loads(runs[1])


# ---------------------------------------------------------------------------- held-out split
@pytest.mark.parametrize(("env_id", "kwargs"), [(RG, RG_KWARGS), (TA, TA_KWARGS)])
def test_the_sides_split_by_content_and_the_plan_proves_it(env_id, kwargs):
    sides = {split: gym.make(env_id, **kwargs, split=split).unwrapped for split in ("train", "eval", "all")}
    keys = {split: [env.task_key(i) for i in range(len(env.tasks))] for split, env in sides.items()}
    assert not set(keys["train"]) & set(keys["eval"]) and sorted(keys["train"] + keys["eval"]) == sorted(keys["all"])
    assert all(is_held_out(key.rsplit("/", 1)[1]) for key in keys["eval"]) and keys["eval"]
    assert len(set(keys["all"])) == len(keys["all"])  # a task drawn twice is one task
    overrides = [f"env.id={env_id}", f"env.kwargs={json.dumps(kwargs)}", "eval.num_tasks=3", "train.iterations=2"]
    summary = build_task_plan(load_config("text_env_cpu", overrides)).summary()
    assert summary["eval_train_overlap"] == 0 and summary["eval_distinct"] == 3 and summary["warnings"] == []
    with pytest.raises(TaskSplitError):
        type(sides["all"]).task_splits({**kwargs, "split": "eval"})


def test_a_game_that_always_starts_alike_has_nothing_to_hold_out():
    config = load_config("text_env_cpu", [f"env.id={TA}", "env.kwargs={game: TowerOfHanoi-v0}", "eval.num_tasks=1"])
    with pytest.raises(TaskPlanError, match="evaluation side has only 0"):
        build_task_plan(config)


# ---------------------------------------------------------------------------- GRPO and ORSD
@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "kwargs"), [(RG, RG_KWARGS), (TA, TA_KWARGS)])
def test_a_tiny_comparison_trains_grpo_and_orsd(env_id, kwargs, tmp_path):
    from orsd_gym.experiments.compare import compare

    base = load_config(
        "text_env_cpu",
        [
            "model.name=tiny-random",
            f"env.id={env_id}",
            f"env.kwargs={json.dumps(kwargs)}",
            "rollout.tasks_per_iteration=2",
            "rollout.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=6",
            "algo.per_algo.orsd.proposal_max_new_tokens=8",
            "train.iterations=1",
            "eval.every=1",
            "eval.num_tasks=2",
            "train.threads=1",
            "logging.live=false",
        ],
    )
    compare(base, ["grpo", "orsd"], [0], tmp_path, live=False)
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["table"]) == {"grpo", "orsd"}
    plans = [
        json.loads((tmp_path / "runs" / f"{arm}-seed0" / "task_plan.json").read_text()) for arm in ("grpo", "orsd")
    ]
    assert plans[0]["keys"]["eval"] == plans[1]["keys"]["eval"]
    assert plans[0]["summary"]["eval_train_overlap"] == 0
