"""The Gymnasium wrappers: history text, admissible choice (and SB3's env checker on every built-in env),
task schedules, template filling and the text encoders."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from contract import fuzz_invalid_actions_are_noops
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

import orsd_gym  # noqa: F401
from orsd_gym.envs import StepOutcome, TextEnv, UnicodeText
from orsd_gym.envs.webshop.shop import SEARCH_TEMPLATE
from orsd_gym.rollout import TaskSpec
from orsd_gym.wrappers import (
    EMPTY_SLOT_ACTION,
    AdmissibleChoice,
    FillActionTemplates,
    HashedBagOfWords,
    HistoryObservation,
    ModelEncoder,
    NoAdmissibleActionsError,
    TaskSchedule,
    make_encoder,
)

GUESS = "orsd_gym/GuessNumber-v0"
#: SB3's checker recommends flat Box observations; `AdmissibleChoice` keeps "actions" as [K, dim] on purpose.
UNCONVENTIONAL_SHAPE = "has an unconventional shape"


def guess(high: int = 8, **kwargs) -> gym.Env:
    return gym.make(GUESS, high=high, **kwargs)


# --------------------------------------------------------------------------- HistoryObservation
def test_history_observation_shows_task_last_k_steps_and_current_observation():
    env = HistoryObservation(guess(8), k=2)
    obs, info = env.reset(options={"task_id": 5})  # hidden number 6
    assert obs.startswith(f"Your task is: {info['task']}\n\nCurrent observation:\nI am thinking")
    first = obs.split("Current observation:\n", 1)[1]
    for action in ("guess 1", "guess 8", "guess 2"):
        obs, *_ = env.step(action)
    assert "Your last 2 steps:" in obs
    assert "Action: guess 1" not in obs and first not in obs  # only the last k steps
    assert "Observation: 1 is too low. Try higher.\nAction: guess 8" in obs
    assert "Observation: 8 is too high. Try lower.\nAction: guess 2" in obs
    assert obs.endswith("Current observation:\n2 is too low. Try higher.")
    assert env.observation_space.contains(obs)


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")
def test_history_observation_keeps_the_text_contract_and_caps_length():
    env = HistoryObservation(guess(8), k=3)
    assert isinstance(env.observation_space, UnicodeText)
    gymnasium_check_env(env, skip_render_check=True)
    env.reset(seed=0)
    obs, *_ = env.step("x" * 2_000)
    assert len(obs) <= env.observation_space.max_length and env.observation_space.contains(obs)
    with pytest.raises(ValueError, match="k"):
        HistoryObservation(guess(8), k=-1)


def test_text_wrappers_keep_the_contract_under_any_input():
    # Any string, bytes, number, None or huge text: an invalid-action step, never an exception.
    fuzz_invalid_actions_are_noops(HistoryObservation(guess(8), k=3))
    fuzz_invalid_actions_are_noops(TaskSchedule(guess(8), [TaskSpec(seed=0, task_id=2)]))


# --------------------------------------------------------------------------- TaskSchedule
def test_task_schedule_plays_exactly_the_given_tasks_each_once_per_pass():
    tasks = [TaskSpec(seed=10 + k, task_id=k) for k in (0, 3, 5, 7)]
    env = TaskSchedule(guess(8), tasks, seed=1)
    played = [env.reset()[1]["task_id"] for _ in range(12)]
    for start in range(0, 12, 4):  # every pass is a permutation of the list
        assert sorted(played[start : start + 4]) == [0, 3, 5, 7]
    assert played[:4] != played[4:8] or played[4:8] != played[8:12]  # passes reshuffle

    again = TaskSchedule(guess(8), tasks, seed=1)
    assert [again.reset()[1]["task_id"] for _ in range(12)] == played  # seeded
    other = TaskSchedule(guess(8), tasks, seed=2)
    assert [other.reset()[1]["task_id"] for _ in range(12)] != played


def test_task_schedule_reset_seed_restarts_and_task_id_option_bypasses():
    env = TaskSchedule(guess(8), [TaskSpec(0, 1), TaskSpec(0, 2), TaskSpec(0, 4)], seed=0, shuffle=True)
    first = [env.reset(seed=7)[1]["task_id"] for _ in range(1)] + [env.reset()[1]["task_id"] for _ in range(2)]
    assert [env.reset(seed=7)[1]["task_id"]] + [env.reset()[1]["task_id"] for _ in range(2)] == first
    env.reset(seed=7)
    assert env.reset(options={"task_id": 6})[1]["task_id"] == 6  # explicit choice, schedule not advanced
    assert env.reset()[1]["task_id"] == first[1]


def test_task_schedule_int_tasks_are_reset_seeds_like_collect():
    seeds = [3, 4, 5]
    expected = [guess(8).reset(seed=s)[1]["task_id"] for s in seeds]
    env = TaskSchedule(guess(8), seeds, shuffle=False)
    assert [env.reset()[1]["task_id"] for _ in seeds] == expected
    with pytest.raises(ValueError, match="at least one task"):
        TaskSchedule(guess(8), [])


# --------------------------------------------------------------------------- AdmissibleChoice
def test_admissible_choice_spaces_slots_and_masks():
    env = AdmissibleChoice(guess(8), max_actions=12)
    obs, info = env.reset(options={"task_id": 2})  # hidden number 3
    assert env.observation_space.contains(obs)
    assert env.slots == info["admissible_actions"] == [f"guess {n}" for n in range(1, 9)]
    mask = env.action_masks()
    assert mask.dtype == bool and mask.tolist() == [True] * 8 + [False] * 4
    assert obs["action_mask"].tolist() == mask.astype(int).tolist()
    assert not obs["actions"][8:].any() and obs["actions"][:8].any()
    _, _, _, _, info = env.step(np.int64(4))  # "guess 5": too high
    assert info["chosen_action"] == "guess 5" and not info["empty_slot"]
    assert env.slots == ["guess 1", "guess 2", "guess 3", "guess 4"]
    assert env.action_masks().sum() == 4
    _, reward, terminated, _, info = env.step(np.array([2]))  # "guess 3", as a vec env hands it over
    assert terminated and info["won"] and reward == 1.0


def test_admissible_choice_empty_slot_is_a_defined_invalid_step():
    env = AdmissibleChoice(guess(8, max_episode_steps=3), max_actions=12)
    env.reset(options={"task_id": 0})
    for slot in (10, 99, -1):  # masked out, out of range, negative
        obs, reward, terminated, truncated, info = env.step(slot)
        assert info["empty_slot"] and info["chosen_action"] == EMPTY_SLOT_ACTION
        assert not info["is_valid_action"] and reward == 0.0 and not terminated
        assert env.observation_space.contains(obs)
    assert truncated  # empty-slot steps still spend the env's step budget


def test_admissible_choice_samples_k_of_many_actions_reproducibly():
    env = AdmissibleChoice(guess(20), max_actions=5)
    _, info = env.reset(seed=3, options={"task_id": 0})
    slots = env.slots
    assert len(slots) == 5 and info["dropped_actions"] == 15
    assert slots == sorted(slots, key=info["admissible_actions"].index)  # env order kept
    assert env.reset(seed=3, options={"task_id": 0}) and env.slots == slots  # same reset seed, same slots
    seen = Counter()
    for seed in range(200):
        env.reset(seed=seed, options={"task_id": 0})
        seen.update(env.slots)
    assert len(seen) == 20  # no admissible action is unreachable (truncation would keep only the first 5)


def test_admissible_choice_requires_listed_actions():
    class Silent(TextEnv):
        tasks = ("only",)

        def _task_text(self, task_id):
            return "say anything"

        def _start_task(self, task_id, options):
            return "Say anything.", {}

        def _play(self, action):
            return StepOutcome("ok", reward=1.0, terminated=True, won=True)

    with pytest.raises(NoAdmissibleActionsError, match="admissible_actions"):
        AdmissibleChoice(Silent()).reset(seed=0)
    with pytest.raises(ValueError, match="max_actions"):
        AdmissibleChoice(guess(8), max_actions=0)


def _check_with_sb3(env: gym.Env) -> None:
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, warn=True, skip_render_check=True)
    sb3_warnings = [str(w.message) for w in caught if "stable_baselines3" in w.filename]
    assert all(UNCONVENTIONAL_SHAPE in message for message in sb3_warnings), sb3_warnings
    env.close()


def test_sb3_check_env_passes_on_guess_number():
    pytest.importorskip("stable_baselines3")
    _check_with_sb3(AdmissibleChoice(HistoryObservation(guess(8), 2), max_actions=12))


def test_sb3_check_env_passes_on_generated_alfworld(tmp_path):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("textworld", reason="ALFWorld needs the alfworld extra (TextWorld)")
    env = gym.make(
        "orsd_gym/ALFWorld-v0",
        generator={"num_tasks": 4, "max_receptacles": 2, "num_distractors": 0},
        task_types=["pick_and_place_simple"],
        cache_dir=str(tmp_path),
        recycle_after=None,
    )
    _check_with_sb3(AdmissibleChoice(HistoryObservation(env, 2), max_actions=16))


@pytest.mark.parametrize("catalog", ["shared", "synthetic"])
def test_sb3_check_env_passes_on_webshop(catalog, monkeypatch, request):
    pytest.importorskip("stable_baselines3")
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    data_dir = str(request.getfixturevalue("shared_data") / "webshop") if catalog == "shared" else None
    env = FillActionTemplates(gym.make("orsd_gym/WebShop-v0", data_dir=data_dir))
    _check_with_sb3(AdmissibleChoice(HistoryObservation(env, 2), max_actions=16))


# --------------------------------------------------------------------------- FillActionTemplates
def test_fill_action_templates_turns_webshop_search_into_a_task_search(monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    env = FillActionTemplates(gym.make("orsd_gym/WebShop-v0"))  # synthetic catalog
    _, info = env.reset(seed=0)
    assert SEARCH_TEMPLATE not in info["admissible_actions"]
    assert info["admissible_actions"][0] == f"search[{info['task']}]"
    _, _, _, _, info = env.step(info["admissible_actions"][0])
    assert info["is_valid_action"] and any(a.startswith("click[") for a in info["admissible_actions"])


# --------------------------------------------------------------------------- encoders
def test_hashed_bag_of_words_is_normalised_and_stable_across_processes():
    encoder = HashedBagOfWords(dim=64)
    vectors = encoder.encode(["go to countertop 1", "go to countertop 1", "take apple 1", ""])
    assert vectors.shape == (4, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0) and not vectors[3].any()
    assert np.array_equal(vectors[0], vectors[1]) and not np.array_equal(vectors[0], vectors[2])
    # crc32, not the per-process salted hash(): a subprocess worker encodes identically.
    code = (
        "from orsd_gym.wrappers import HashedBagOfWords; "
        "print(HashedBagOfWords(dim=64).encode(['go to countertop 1'])[0].tolist())"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert np.allclose(eval(child.stdout), vectors[0])
    assert HashedBagOfWords(dim=64, bigrams=False).encode(["a b"]).nonzero()[1].size <= 2
    assert pickle.loads(pickle.dumps(encoder)) == encoder


def test_model_encoder_mean_pools_caches_and_pickles_without_its_model():
    pytest.importorskip("torch")
    encoder = ModelEncoder("tiny-random", max_tokens=32)
    texts = ["go to countertop 1", "take apple 1 from countertop 1"]
    vectors = encoder.encode(texts)
    assert vectors.shape == (2, encoder.dim) == (2, 64) and vectors.dtype == np.float32
    assert len(encoder._cache) == 2
    assert np.array_equal(encoder.encode(texts[::-1]), vectors[::-1])  # served from the cache
    clone = pickle.loads(pickle.dumps(encoder))
    assert clone._policy is None and not clone._cache
    assert np.allclose(clone.encode(texts), vectors, atol=1e-5)
    assert np.allclose(encoder.encode(["x " * 500]), clone.encode(["x " * 500]), atol=1e-5)  # long texts truncate


def test_make_encoder_names():
    assert make_encoder("hashed") == HashedBagOfWords()
    assert isinstance(make_encoder("model:tiny-random"), ModelEncoder)
    custom = HashedBagOfWords(dim=8)
    assert make_encoder(custom) is custom
    with pytest.raises(ValueError, match="model:"):
        make_encoder("smollm2-135m")
