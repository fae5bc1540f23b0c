"""Envs in Ray actors (``env_backend="ray"``): the same trajectories as envs in this process, and
an actor that dies mid-rollout is replaced and its episodes replayed, never dropped."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("ray")

import orsd_gym  # noqa: F401,E402
from orsd_gym.errors import EnvReplayError  # noqa: E402
from orsd_gym.policies.base import SamplingParams  # noqa: E402
from orsd_gym.rollout import EnvSetup, RolloutOptions, TaskSpec, collect  # noqa: E402
from orsd_gym.rollout.ray_envs import EnvActorLostWarning, RayEnvSlots  # noqa: E402
from orsd_gym.rollout.stats import rollout_stats  # noqa: E402

GUESS = "orsd_gym/GuessNumber-v0"
#: What must agree between two rollouts of the same episodes.
SAME = ("token_ids", "logprobs", "actions", "observations", "rewards", "group_id", "episode_id", "success")


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert {k: getattr(x, k) for k in SAME} == {k: getattr(y, k) for k in SAME}


class _KillsBeforeTurn:
    """The policy, except that an env actor is killed before its ``turn``-th generation call."""

    def __init__(self, policy, kill, turn: int) -> None:
        self._policy, self._kill, self._turn, self._calls = policy, kill, turn, 0

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def generate(self, *args, **kwargs):
        self._calls += 1
        if self._calls == self._turn:
            self._kill()
        return self._policy.generate(*args, **kwargs)


def _kill(ray, actor) -> None:
    """Kill ``actor`` and wait until Ray reports it dead (a call may still land before the kill)."""
    ray.kill(actor)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.env_id.remote(), timeout=60)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise AssertionError("the killed actor still answers")


GUESS_RUN = {
    "group_size": 2,
    "sampling": SamplingParams(max_new_tokens=6, seed=3),
    "options": RolloutOptions(max_turns=3, action_format="last_line"),
}
GUESS_KWARGS = {"high": 20}
TASKS = [TaskSpec(seed=1, task_id=3), TaskSpec(seed=2, task_id=11)]


def test_ray_actors_play_the_same_episodes_as_local_envs(ray_cluster, policy):
    local = collect(EnvSetup(GUESS, GUESS_KWARGS, num_envs=4), policy, TASKS, **GUESS_RUN)
    remote = collect(EnvSetup(GUESS, GUESS_KWARGS, num_envs=4, backend="ray"), policy, TASKS, **GUESS_RUN)
    _same(local, remote)
    assert all("env_replays" not in t.extra for t in local)
    assert [t.extra["env_replays"] for t in remote] == [0, 0, 0, 0]
    assert rollout_stats(remote)["env_replays"] == 0 and "env_replays" not in rollout_stats(local)


def test_a_killed_actor_is_replaced_and_its_episodes_replayed(ray_cluster, policy):
    local = collect(EnvSetup(GUESS, GUESS_KWARGS, num_envs=4), policy, TASKS, **GUESS_RUN)
    slots = RayEnvSlots(GUESS, 4, GUESS_KWARGS, envs_per_actor=2)
    try:
        first_actor = slots._actors[0]  # slots 0 and 1: group 0's two episodes
        killing = _KillsBeforeTurn(policy, lambda: _kill(ray_cluster, first_actor), turn=2)
        with pytest.warns(EnvActorLostWarning, match="replaying"):
            remote = collect(slots, killing, TASKS, **GUESS_RUN)
        assert slots.lost_actors == 1 and slots._actors[0] is not first_actor
    finally:
        slots.close()
    _same(local, remote)  # the replayed episodes are the ones that would have been played
    expected = [int(t.episode_id in (0, 1) and t.num_turns >= 2) for t in local]
    assert sum(expected) >= 1
    assert [t.extra["env_replays"] for t in remote] == expected
    assert rollout_stats(remote)["env_replays"] == sum(expected)


def test_an_env_that_cannot_be_replayed_fails_loudly(ray_cluster, policy):
    """A replay that gives other observations than the episode had is an error, not a new episode."""
    slots = RayEnvSlots("resumable_env:orsd_gym/VowelTest-v0", 1)
    try:
        slots.reset_many({0: (0, {"task_id": 0})})
        slots._episodes[0].digests[0] = "not what the reset said"
        _kill(ray_cluster, slots._actors[0])
        with pytest.warns(EnvActorLostWarning), pytest.raises(EnvReplayError, match="deterministic"):
            slots.step({0: "aeiou"})
    finally:
        slots.close()


def _both_backends(policy, env_id: str, **env_kwargs):
    run = {
        "group_size": 2,
        "sampling": SamplingParams(max_new_tokens=12),
        "options": RolloutOptions(max_turns=2),
    }
    local = collect(EnvSetup(env_id, env_kwargs), policy, [0], **run)
    remote = collect(EnvSetup(env_id, env_kwargs, backend="ray"), policy, [0], **run)
    _same(local, remote)
    assert all(t.env_id == env_id for t in remote) and all(t.num_turns >= 1 for t in remote)


@pytest.mark.slow
def test_alfworld_runs_in_ray_actors(ray_cluster, policy):
    pytest.importorskip("textworld")
    _both_backends(
        policy, "orsd_gym/ALFWorld-v0", generator={"num_tasks": 2, "max_receptacles": 3, "num_distractors": 1}
    )


@pytest.mark.slow
def test_webshop_runs_in_ray_actors(ray_cluster, policy):
    _both_backends(policy, "orsd_gym/WebShop-v0")


#: A user's plain Gymnasium env in a file only the driver names (as a config's ``plugins``).
ECHO_PLUGIN = """
import gymnasium as gym


class Echo(gym.Env):
    observation_space = gym.spaces.Text(200)
    action_space = gym.spaces.Text(200)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return f"say {int(self.np_random.integers(100))}", {}

    def step(self, action):
        return f"you said {action}", 1.0, True, False, {}


gym.register("EchoPluginTest-v0", entry_point=Echo)
"""


def test_env_actors_import_the_drivers_plugins(ray_cluster, tmp_path, monkeypatch):
    """An env registered by a plugin file (no ``module:`` prefix in its id) is made in the actors."""
    from orsd_gym import plugins

    monkeypatch.setattr(plugins, "_IMPORTED", {})  # this test's plugin stays out of later tests' actors
    path = tmp_path / "echo_plugin.py"
    path.write_text(ECHO_PLUGIN)
    plugins.import_plugins([str(path)])
    slots = RayEnvSlots("EchoPluginTest-v0", 2, envs_per_actor=1)
    try:
        replies = slots.reset_many({0: (7, {}), 1: (7, {})})
        assert replies[0][0] == replies[1][0] and replies[0][0].startswith("say ")
        assert slots.step({0: "hi"})[0][:2] == ("you said hi", 1.0)
    finally:
        slots.close()
