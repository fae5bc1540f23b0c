"""Reusable checks of the text-env contract (`orsd_gym.envs.base`); every env's tests call these."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orsd_gym.envs import UnicodeText

REQUIRED_INFO_KEYS = ("task", "task_id", "won", "is_valid_action", "admissible_actions")


def assert_info_contract(info: dict, *, step: bool = False) -> None:
    """The keys every info carries (``step``: a step's info, which also says ``no_progress``)."""
    if step:
        assert isinstance(info.get("no_progress"), bool), f"a step's info lacks no_progress: {sorted(info)}"
    for key in REQUIRED_INFO_KEYS:
        assert key in info, f"info lacks {key!r}: {sorted(info)}"
    assert isinstance(info["task"], str) and info["task"]
    assert isinstance(info["task_id"], int)
    assert isinstance(info["won"], bool)
    assert isinstance(info["is_valid_action"], bool)
    assert isinstance(info["admissible_actions"], list)
    assert all(isinstance(a, str) for a in info["admissible_actions"])


def assert_spaces_and_checker(env: gym.Env) -> None:
    assert isinstance(env.observation_space, UnicodeText)
    assert isinstance(env.action_space, UnicodeText)
    assert isinstance(env.observation_space, gym.spaces.Text)
    check_env(env.unwrapped, skip_render_check=True)


def assert_seed_determinism(make_env: Callable[[], gym.Env], seeds=(0, 1, 7)) -> None:
    first, second = make_env(), make_env()
    try:
        for seed in seeds:
            obs_a, info_a = first.reset(seed=seed)
            obs_b, info_b = second.reset(seed=seed)
            assert obs_a == obs_b, f"seed {seed}: first observations differ"
            assert info_a["task_id"] == info_b["task_id"]
            assert info_a["task"] == info_b["task"]
            assert_info_contract(info_a)
    finally:
        first.close()
        second.close()


def assert_task_id_option(env: gym.Env) -> None:
    tasks = env.unwrapped.tasks
    assert len(tasks) > 0
    for task_id in sorted({0, len(tasks) - 1}):
        _, info = env.reset(options={"task_id": task_id})
        assert info["task_id"] == task_id


#: What a fuzzer should send: empty, whitespace, unicode, control chars, near-commands, huge
#: text, and things that are not text at all (bytes, numbers, None, lists).
ACTION_STRATEGY = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["", " ", "\n", "look", "go to", "click[", "search[]", "put  in ", "\x00\x1b[31m"]),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=20).map(lambda s: s * 500),
    st.just("take " * 40_000),
    st.binary(max_size=40),
    st.one_of(st.none(), st.integers(), st.floats(), st.lists(st.text(max_size=5), max_size=3)),
)


def fuzz_invalid_actions_are_noops(env: gym.Env, *, seed: int = 0, max_examples: int = 40) -> None:
    """Random strings never raise; an action reported invalid leaves the observation stream
    unchanged apart from the feedback line and the admissible actions unchanged."""
    env.reset(seed=seed)

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(action=ACTION_STRATEGY)
    def check(action: str) -> None:
        before = list(env.unwrapped.admissible_actions())
        if isinstance(action, str) and action in before:
            return
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and env.observation_space.contains(obs)
        assert_info_contract(info, step=True)
        if not isinstance(action, str):
            assert not info["is_valid_action"]
        if not info["is_valid_action"]:
            assert reward == 0.0 and not terminated
            assert list(env.unwrapped.admissible_actions()) == before
        if terminated or truncated:
            env.reset(seed=seed)

    check()


# --------------------------------------------------------------------------- any env the collector steps


class PlainTextGame(gym.Env):
    """A plain `gymnasium.Env` (not a `TextEnv`, so nothing of the package checks it itself)
    speaking text: every observation is ``observation``, the episode ends after ``steps``
    steps. ``fault`` breaks the contract on purpose: it replaces the reply ``when`` the env
    resets or steps (see `CONTRACT_FAULTS`)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        fault: Callable[[tuple], tuple] | None = None,
        when: str = "step",
        *,
        observation: str = "Say the word 'ok'.",
        steps: int = 1,
    ) -> None:
        self.observation_space = gym.spaces.Text(max_length=10**7)
        self.action_space = gym.spaces.Text(max_length=1000)
        self.fault, self.when = fault, when
        self.observation, self.steps, self._taken = observation, steps, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._taken = 0
        reply = (self.observation, {"task": "Say the word 'ok'.", "admissible_actions": ["ok"]})
        return self.fault(reply) if self.fault and self.when == "reset" else reply

    def step(self, action):
        self._taken += 1
        reply = (self.observation, 1.0, self._taken >= self.steps, False, {"won": action == "ok"})
        return self.fault(reply) if self.fault and self.when == "step" else reply


def _raise(reply: tuple) -> tuple:
    raise ValueError("engine crashed")


#: A broken reply (``when``, how it is broken) -> what the collector's one-line error says.
CONTRACT_FAULTS = {
    "an int observation at reset": ("reset", lambda r: (42, *r[1:]), r"at reset returned a int observation"),
    "bytes observation": ("step", lambda r: (b"ok", *r[1:]), r"after action .* returned a bytes observation"),
    # (a vector env's own batching of the infos is what fails first there)
    "a list info at reset": ("reset", lambda r: (r[0], ["ok"]), r"at reset (returned a list info|raised Attr)"),
    "a NaN reward": ("step", lambda r: (r[0], float("nan"), *r[2:]), r"after action .* returned the reward nan"),
    "a None reward": ("step", lambda r: (r[0], None, *r[2:]), r"after action .* returned the reward None"),
    "a reset that raises": ("reset", _raise, r"at reset raised ValueError: engine crashed"),
    "a step that raises": ("step", _raise, r"after action .* raised ValueError: engine crashed"),
}


# --------------------------------------------------------------------------- observation sizes

#: Observation lengths (characters) from nothing to far beyond a sample's token budget: what a
#: page dump or a log can be.
OBSERVATION_SIZES = st.one_of(st.integers(0, 8_000), st.sampled_from([1, 2_000, 40_000, 3_000_000]))
#: The text they are made of (repeated to the size): any unicode, markup, whitespace runs.
OBSERVATION_TEXT = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40),
    st.sampled_from(["[kernel] 12:00:01 ok\n", "<div class='x'>", " " * 50, "-" * 80, "日本語のログ"]),
)


def fuzz_observation_sizes(play: Callable[[str], list], budget: int, *, max_examples: int = 25) -> None:
    """``play(observation)`` (a collect on an env whose every observation is ``observation``)
    never raises, keeps every sample within ``budget`` tokens, and shows the model an
    observation whole or cut with the marker (counted in the step's info and the episode's
    ``observations_cut``); short ones are never cut."""
    from orsd_gym.rollout.fit import CUT_MARKER

    marker = CUT_MARKER.split("{")[0]

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(size=OBSERVATION_SIZES, text=OBSERVATION_TEXT)
    def check(size: int, text: str) -> None:
        observation = (text * (size // len(text) + 1))[:size]
        for sample in play(observation):
            assert len(sample.token_ids) <= budget
            assert len(sample.token_ids) == len(sample.loss_mask) == len(sample.logprobs)
            for span in sample.spans:
                assert set(sample.loss_mask[span.start : span.end]) == ({1} if span.kind == "model" else {0})
            cuts = [info.get("observation_cut") for info in sample.infos]
            assert sample.extra["observations_cut"] == sum(cut is not None for cut in cuts)
            for seen, cut in zip(sample.observations, cuts, strict=True):
                if cut is None:
                    assert seen == observation
                else:
                    assert cut["total_chars"] == size and cut["shown_chars"] < size
                    assert seen.startswith(observation[: cut["shown_chars"]]) and marker in seen
            if size <= 40:
                assert not any(cuts)
            if cuts[0] is not None:  # a cut first observation leaves the model its turn
                assert sample.model_spans()

    check()
