"""The collector on real envs with tiny-random: well-formed Trajectories, groups, budgets, CLI."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest
from contract import CONTRACT_FAULTS, PlainTextGame

pytest.importorskip("torch")

import orsd_gym  # noqa: F401,E402
from orsd_gym.policies.base import SamplingParams  # noqa: E402
from orsd_gym.rollout import RolloutOptions, TaskSpec, collect, group_by, load_jsonl, save_jsonl  # noqa: E402
from orsd_gym.rollout.collector import EnvSetup, Teacher, expert_teacher  # noqa: E402
from orsd_gym.rollout.trajectory import Trajectory  # noqa: E402

GUESS = "orsd_gym/GuessNumber-v0"


def assert_well_formed(t: Trajectory, tokenizer) -> None:
    n = len(t.token_ids)
    assert n == len(t.loss_mask) == len(t.logprobs) > 0
    assert t.spans[0].kind == "prompt" and t.spans[0].start == 0 and t.spans[-1].end == n
    assert all(a.end == b.start for a, b in zip(t.spans, t.spans[1:]))
    model = t.model_spans()
    assert len(model) == len(t.model_turns) == len(t.format_valid) == len(t.actions) == len(t.rewards)
    assert len(t.observations) == len(t.infos) == t.num_turns + 1
    for span in t.spans:
        masks = set(t.loss_mask[span.start : span.end])
        assert masks == ({1} if span.kind == "model" else {0})
        if span.kind != "model":
            assert all(lp == 0.0 for lp in t.logprobs[span.start : span.end])
    for span, text in zip(model, t.model_turns):
        decoded = tokenizer.decode(t.token_ids[span.start : span.end])
        assert decoded == text or decoded == text + tokenizer.eos_token
    # Observations after non-final steps appear (masked) in env spans.
    env_text = [tokenizer.decode(t.token_ids[s.start : s.end]) for s in t.spans if s.kind == "env"]
    for obs, bridge in zip(t.observations[1:], env_text):
        assert obs in bridge
    assert t.terminated or t.truncated
    assert t.success == any(info["won"] for info in t.infos)


def test_guess_number_groups_are_well_formed_and_deterministic(policy, tmp_path):
    kwargs = dict(
        group_size=3,
        sampling=SamplingParams(max_new_tokens=12, seed=5),
        options=RolloutOptions(max_turns=4),
    )
    envs = EnvSetup(GUESS, num_envs=4)
    trajectories = collect(envs, policy, [0, 1, TaskSpec(seed=2, task_id=6)], **kwargs)
    assert len(trajectories) == 9
    groups = group_by(trajectories)
    assert list(groups) == [0, 1, 2]
    for group in groups.values():
        assert len(group) == 3
        assert len({(t.seed, t.task_id, t.observations[0]) for t in group}) == 1  # same task in a group
        assert len({tuple(t.token_ids) for t in group}) == 3  # different sampling noise
    assert groups[2][0].task_id == 6
    for t in trajectories:
        assert_well_formed(t, policy.tokenizer)
        assert t.env_id == GUESS and t.num_turns <= 4
        assert t.extra["reused_prefix_tokens"] > 0 or t.num_turns == 1
    again = collect(envs, policy, [0, 1, TaskSpec(seed=2, task_id=6)], **kwargs)
    assert [t.token_ids for t in again] == [t.token_ids for t in trajectories]
    path = tmp_path / "t.jsonl"
    save_jsonl(trajectories, path)
    assert load_jsonl(path) == trajectories


def test_scripted_winner_reaches_success(policy):
    """Greedy search through the env's feedback with the real collector: ensures rewards/success flow."""
    env = gym.make(GUESS)
    out = collect(
        env,
        policy,
        [TaskSpec(seed=0, task_id=0)],
        group_size=1,
        sampling=SamplingParams(max_new_tokens=4),
        options=RolloutOptions(on_unparsable="noop", noop_action="guess 1", max_turns=3),
    )
    env.close()
    (t,) = out
    assert t.actions[0] == "guess 1" and t.format_valid[0] is False  # random text is unparsable -> noop
    assert t.success and t.terminated and t.rewards == [1.0]


def test_token_budget_truncates_and_keeps_the_episode(policy):
    out = collect(
        GUESS,
        policy,
        [0],
        group_size=2,
        sampling=SamplingParams(max_new_tokens=16),
        options=RolloutOptions(max_episode_tokens=150, max_turns=10),
    )
    assert len(out) == 2
    for t in out:
        assert t.truncated and not t.terminated and t.extra["cut_by"] == "max_episode_tokens"
        assert len(t.token_ids) <= 150
        assert_well_formed(t, policy.tokenizer)


def test_vector_env_and_no_kv_cache_give_the_same_tokens(policy):
    kwargs = dict(group_size=2, sampling=SamplingParams(max_new_tokens=8, seed=1))
    vec = gym.make_vec(GUESS, num_envs=4, vectorization_mode="sync")
    try:
        from_vec = collect(vec, policy, [3, 4], options=RolloutOptions(max_turns=3), **kwargs)
    finally:
        vec.close()
    no_cache = RolloutOptions(max_turns=3, kv_cache=False)
    plain = collect(EnvSetup(GUESS, num_envs=4), policy, [3, 4], options=no_cache, **kwargs)
    assert [t.token_ids for t in from_vec] == [t.token_ids for t in plain]
    assert all(t.extra["reused_prefix_tokens"] == 0 for t in plain)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_idle_vector_env_slots_are_never_stepped(policy, mode):
    from counting_env import ENV_ID

    # Five slots for four episodes (one slot is never reset); a teacher that always guesses 1
    # ends the episodes of task 0 (hidden number 1) at once and plays task 1's for 4 turns, so
    # two slots sit idle for three rounds. Only steps of episodes in progress reach the envs.
    vec = gym.make_vec(ENV_ID, num_envs=5, vectorization_mode=mode, high=2)
    try:
        out = collect(
            vec,
            Teacher(policy, lambda info: "guess 1"),
            [TaskSpec(seed=0, task_id=0), TaskSpec(seed=0, task_id=1)],
            group_size=2,
            options=RolloutOptions(max_turns=4),
        )
        steps = sum(vec.get_attr("steps_taken"))
    finally:
        vec.close()
    assert [len(t.actions) for t in out] == [1, 1, 4, 4]
    assert steps == 10


def test_per_step_layout(policy):
    out = collect(
        GUESS,
        policy,
        [0],
        group_size=2,
        sampling=SamplingParams(max_new_tokens=8),
        options=RolloutOptions(layout="per_step", history=2, max_turns=3),
    )
    steps = [t.step for t in out]
    assert steps.count(0) == 2 and max(steps) == 2
    assert len({t.episode_id for t in out}) == 2  # every sample names its episode
    for t in out:
        assert [s.kind for s in t.spans] == ["prompt", "model"]
        if t.step > 0:
            assert t.prompt_messages[1]["content"].startswith("Your task is:")
        if t.step == 2:
            assert "Your last 2 steps" in t.prompt_messages[1]["content"]


def test_per_step_samples_state_the_task_once(policy, monkeypatch):
    # WebShop's pages quote the instruction: the sample does not repeat it above the page.
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    out = collect(
        EnvSetup("orsd_gym/WebShop-v0", kwargs={"expert": True}),
        Teacher(policy, expert_teacher),
        [0],
        group_size=1,
        options=RolloutOptions(layout="per_step", history=0, max_turns=3, action_format="admissible"),
    )
    assert len(out) == 3
    for t in out:
        assert t.prompt_messages[1]["content"].count(t.task) == 1 + (t.step == 0)  # + the listed search


def test_bad_arguments(policy):
    with pytest.raises(ValueError, match="layout"):
        collect(GUESS, policy, [0], options=RolloutOptions(layout="tree"))
    with pytest.raises(TypeError, match="TaskSpec"):
        collect(GUESS, policy, ["zero"])
    with pytest.raises(ValueError, match="group_size"):
        collect(GUESS, policy, [0], group_size=0)


def _two_attempts(policy, env_id: str, **env_kwargs):
    env = gym.make(env_id, **env_kwargs)
    try:
        out = collect(
            EnvSetup(env, num_envs=1),
            policy,
            [0],
            group_size=2,
            sampling=SamplingParams(max_new_tokens=12),
            options=RolloutOptions(max_turns=3),
        )
    finally:
        env.close()
    for t in out:
        assert_well_formed(t, policy.tokenizer)
    return out


@pytest.mark.slow
def test_alfworld_generated_rollout(policy):
    out = _two_attempts(
        policy, "orsd_gym/ALFWorld-v0", generator={"num_tasks": 2, "max_receptacles": 3, "num_distractors": 1}
    )
    for t in out:
        assert "Admissible actions:" in t.prompt_messages[1]["content"]


@pytest.mark.slow
def test_webshop_rollout(policy):
    _two_attempts(policy, "orsd_gym/WebShop-v0")


def test_cli_end_to_end(policy, tmp_path):
    out = tmp_path / "r.jsonl"
    # Through main() of the imported module (as the `orsd-gym` script does), not `-m orsd_gym.cli`.
    entry = "import sys; from orsd_gym.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [
        sys.executable,
        "-c",
        entry,
        "rollout",
        "--env",
        GUESS,
        "--model",
        "tiny-random",
        "--tasks",
        "2",
        "--group",
        "2",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
        "--quiet",
    ]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert "success rate" in done.stdout and "wrote 4 trajectories" in done.stdout
    assert len(load_jsonl(out)) == 4
    bad = subprocess.run([*cmd[:5], "orsd_gym/Nope-v0", *cmd[6:]], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown env" in bad.stderr


def test_choosing_from_admissible_actions_shows_them_and_needs_an_env_that_lists_them(policy):
    from orsd_gym.errors import ConfigError

    options = RolloutOptions(action_format="admissible", max_turns=1)
    # GuessNumber hides its list by default; the format that asks for a choice shows it.
    (played,) = collect(GUESS, policy, [0], group_size=1, sampling=SamplingParams(max_new_tokens=4), options=options)
    assert "1. guess 1" in played.prompt_messages[1]["content"]

    class NoList(gym.Wrapper):
        def reset(self, **kwargs):
            observation, info = self.env.reset(**kwargs)
            return observation, {k: v for k, v in info.items() if k != "admissible_actions"}

    calls = []
    generate = policy.generate
    policy.generate = lambda *args, **kwargs: calls.append(1) or generate(*args, **kwargs)
    try:
        with pytest.raises(ConfigError, match="lists none at reset.*last_line"):
            collect([NoList(gym.make(GUESS))], policy, [0], group_size=1, options=options)
    finally:
        del policy.generate
    assert not calls  # refused before any turn was generated


def test_a_plain_gym_env_with_a_non_text_observation_is_named_with_its_task(policy):
    from orsd_gym.errors import EnvContractError

    class NumberObservations(gym.Wrapper):
        def step(self, action):
            _, *rest = self.env.step(action)
            return 42, *rest

    options = RolloutOptions(action_format="last_line", max_turns=2)
    sampling = SamplingParams(max_new_tokens=4)
    with pytest.raises(EnvContractError, match=r"task seed 3.*after action .* returned a int observation"):
        collect([NumberObservations(gym.make(GUESS))], policy, [3], group_size=1, sampling=sampling, options=options)


@pytest.mark.parametrize("wrapping", ["an env", "a list of envs", "a SyncVectorEnv"])
@pytest.mark.parametrize("fault", sorted(CONTRACT_FAULTS))
def test_any_env_the_collector_steps_meets_the_contract_or_is_named(policy, fault, wrapping):
    """The checks a `TextEnv` makes of its engine apply to a plain `gymnasium.Env` too, however
    it is handed to the collector: one error naming the task and the action, nothing coerced."""
    from orsd_gym.errors import EnvContractError

    when, breaks, said = CONTRACT_FAULTS[fault]
    env = {
        "an env": lambda: PlainTextGame(breaks, when),
        "a list of envs": lambda: [PlainTextGame(breaks, when)],
        "a SyncVectorEnv": lambda: gym.vector.SyncVectorEnv([lambda: PlainTextGame(breaks, when)]),
    }[wrapping]()
    options = RolloutOptions(action_format="last_line", max_turns=2)
    with pytest.raises(EnvContractError, match=r"task seed 3, task id None\) " + said):
        collect(env, policy, [3], group_size=1, sampling=SamplingParams(max_new_tokens=4), options=options)
