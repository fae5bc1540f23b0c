"""The contract itself (base class, registry, vector envs) on the engine-free example env."""

from __future__ import annotations

import math
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
from hypothesis import given, settings
from hypothesis import strategies as st

import orsd_gym  # noqa: F401
from orsd_gym.envs import StepOutcome, TextEnv, UnicodeText, register_text_env, registered_text_envs
from orsd_gym.errors import TaskSelectionError

GUESS = "orsd_gym/GuessNumber-v0"


def test_import_is_light():
    code = "import sys, orsd_gym; print(any(m in sys.modules for m in ('torch', 'textworld', 'transformers')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unicode_text_space_accepts_real_text():
    space = UnicodeText(100)
    assert space.contains("Crème brûlée™ 3×4 — 10% off\nnext line\ttab")
    assert not space.contains("bell\x07") and not space.contains("\x1b[31m")
    assert space.contains("a1-wine\u00a0red, \u200dsoft\u00adhyphen")  # no-break space, ZWJ, soft hyphen
    assert not space.contains("x" * 101)
    assert not space.contains(b"bytes")
    assert space.contains(space.sample())


def test_guess_number_contract():
    env = gym.make(GUESS)
    assert_spaces_and_checker(env)
    assert_task_id_option(env)
    assert_seed_determinism(lambda: gym.make(GUESS))
    fuzz_invalid_actions_are_noops(env)


def test_step_accepts_any_input():
    env = gym.make(GUESS)
    obs0, _ = env.reset(seed=0)
    for action in ["", "x" * 100_000, "guess ∞", "\x00", 42, None, ["guess", 1]]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert_info_contract(info, step=True)
        assert info["is_valid_action"] is False
        assert reward == 0.0 and not terminated


def test_win_terminates_and_reports_won():
    env = gym.make(GUESS)
    _, info = env.reset(options={"task_id": 4})  # hides 5
    obs, reward, terminated, truncated, info = env.step("guess 5")
    assert (reward, terminated, info["won"]) == (1.0, True, True)
    obs, reward, terminated, _, info = env.step("guess 5")  # after the end: defined outcome
    assert terminated and reward == 0.0 and info["is_valid_action"] is False
    assert_info_contract(info, step=True)


def test_step_budget_truncates():
    env = gym.make(GUESS, max_episode_steps=3)
    env.reset(options={"task_id": 19})
    outcomes = [env.step("guess 1") for _ in range(3)]
    assert [o[3] for o in outcomes] == [False, False, True]
    assert not any(o[2] for o in outcomes)


def test_bad_task_id_is_a_clear_error():
    env = gym.make(GUESS)
    with pytest.raises(TaskSelectionError, match="task_id"):
        env.reset(options={"task_id": 10_000})


class _EchoEnv(TextEnv):
    """A user-defined env in a dozen lines: say the secret word."""

    words = ("apple", "river", "cloud")

    @property
    def tasks(self):
        return self.words

    def _task_text(self, task_id):
        return f"Say the word {self.words[task_id]!r}."

    def _start_task(self, task_id, options):
        return f"Your task is to: {self._task_text(task_id)}", {}

    def _play(self, action):
        if action.strip() == self.words[self.task_id]:
            return StepOutcome("Well done.", reward=1.0, terminated=True, won=True)
        return StepOutcome("Nothing happens.", is_valid_action=False)


def test_user_env_registers_and_passes_contract():
    env_id = register_text_env("EchoTest", f"{__name__}:_EchoEnv", description="test env", max_episode_steps=5)
    assert env_id == "orsd_gym/EchoTest-v0"
    assert env_id in {info.env_id for info in registered_text_envs()}
    env = gym.make(env_id)
    assert_spaces_and_checker(env)
    assert_seed_determinism(lambda: gym.make(env_id))
    fuzz_invalid_actions_are_noops(env)
    _, info = env.reset(options={"task_id": 1})
    assert env.step("river")[1] == 1.0


class _BrokenEnv(TextEnv):
    """A user env whose engine hands back whatever the test injects."""

    start: object = ("Your task is to: wait.", {})
    outcome: object = StepOutcome("ok")

    @property
    def tasks(self):
        return ("wait",)

    def _task_text(self, task_id):
        return "Wait."

    def _start_task(self, task_id, options):
        if isinstance(self.start, Exception):
            raise self.start
        return self.start

    def _play(self, action):
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


NOT_TEXT = st.one_of(st.none(), st.integers(), st.binary(max_size=8), st.lists(st.integers(), max_size=2), st.floats())


@settings(max_examples=60, deadline=None)
@given(
    st.one_of(
        st.builds(lambda o: ("reset", (o, {})), NOT_TEXT),
        st.builds(lambda o: ("reset", o), NOT_TEXT),
        st.builds(lambda o: ("reset", ("ok", o)), st.one_of(st.none(), st.integers(), st.text(max_size=3))),
        st.builds(lambda o: ("step", StepOutcome(o)), NOT_TEXT),
        st.builds(lambda r: ("step", StepOutcome("ok", reward=r)), st.one_of(NOT_TEXT, st.just(float("nan")))),
        st.builds(lambda i: ("step", StepOutcome("ok", info=i)), st.one_of(st.none(), st.integers())),
        st.builds(lambda o: ("step", o), NOT_TEXT),
        st.just(("reset", KeyError("slice"))),
        st.just(("step", ValueError("engine crashed"))),
    ),
    st.text(max_size=20),
)
def test_an_env_returning_bad_types_gives_one_clear_error_naming_task_and_action(broken, action):
    from orsd_gym.errors import EnvContractError

    where, value = broken
    env = _BrokenEnv()
    if where == "reset":
        env.start = value
        with pytest.raises(EnvContractError, match=r"_BrokenEnv \(task task-0\) at reset: "):
            env.reset(seed=0)
        return
    env.reset(seed=0)
    env.outcome = value
    if isinstance(value, StepOutcome) and _well_formed(value):  # an int reward, say: a valid step
        assert env.step(action)[1] == float(value.reward)
        return
    with pytest.raises(EnvContractError, match=r"_BrokenEnv \(task task-0\) after action ") as raised:
        env.step(action)
    assert repr(action[:200]) in str(raised.value)


def _well_formed(outcome: StepOutcome) -> bool:
    reward = outcome.reward
    number = isinstance(reward, (int, float)) and not isinstance(reward, bool) and math.isfinite(reward)
    return number and isinstance(outcome.observation, str) and isinstance(outcome.info, dict)


def test_register_accepts_an_env_class():
    env_id = register_text_env("EchoClassTest", _EchoEnv, max_episode_steps=2)
    assert gym.make(env_id).reset(options={"task_id": 0})[1]["task"] == "Say the word 'apple'."
    assert any(info.entry_point.endswith(":_EchoEnv") for info in registered_text_envs() if info.env_id == env_id)


def test_register_rejects_bad_names():
    with pytest.raises(ValueError, match="env name"):
        register_text_env("bad name", "x:y")
    with pytest.raises(ValueError, match="entry_point"):
        register_text_env("Fine", "no_colon")


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_make_vec_steps_text_envs(mode):
    envs = gym.make_vec(GUESS, num_envs=2, vectorization_mode=mode)
    try:
        obs, infos = envs.reset(seed=[3, 4])
        assert len(obs) == 2 and all(isinstance(o, str) and "Your task is to" in o for o in obs)
        expected = [gym.make(GUESS).reset(seed=seed)[1]["task_id"] for seed in (3, 4)]
        assert list(infos["task_id"]) == expected
        obs, rewards, terminated, truncated, infos = envs.step(["guess 1", "not an action"])
        assert "too low" in obs[0] or "Correct" in obs[0]
        assert obs[1].startswith("Nothing happens")
        assert list(infos["is_valid_action"]) == [True, False]
        assert all(isinstance(a, list) for a in infos["admissible_actions"])
    finally:
        envs.close()
