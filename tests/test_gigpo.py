"""GiGPO's advantages on hand-built groups against values computed by hand, in both layouts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from orsd_gym.algos import GiGPOConfig, algorithm_config_class, make_algorithm
from orsd_gym.algos.gigpo import discounted_returns, step_advantages, turn_token_values
from orsd_gym.algos.rewards import RewardConfig, trajectory_reward, turn_rewards
from orsd_gym.envs import StepOutcome, TextEnv, register_text_env
from orsd_gym.envs.base import NO_PROGRESS
from orsd_gym.rollout.trajectory import Trajectory, TurnSpan

torch.set_num_threads(1)

PROMPT, MODEL, BRIDGE = [1, 2], [3, 4], [5]


def _attempt(
    group_id: int, episode_id: int, states: list[str], won_at: int | None, layout: str, env_id: str = "orsd_gym/Test-v0"
) -> list[Trajectory]:
    """One attempt that acted in ``states`` (turn t in states[t]) and won on turn ``won_at``, laid
    out as the collector lays it out: one sequence (prompt, then per turn a model span and, but
    after the last turn, an observation span) or one sample per turn (prompt, model span)."""
    turns = len(states)
    record = {
        "rewards": [1.0 if t == won_at else 0.0 for t in range(turns)],
        "infos": [{"task_key": f"task-{group_id}"}] + [{"won": t == won_at} for t in range(turns)],
        "model_turns": [f"act {t}" for t in range(turns)],
        "actions": [f"act {t}" for t in range(turns)],
        "observations": [*states, "after the last turn"],
        "task": "t",
        "prompt_messages": [],
        "env_id": env_id,
        "task_id": group_id,
        "group_id": group_id,
        "episode_id": episode_id,
        "success": won_at is not None,
        "format_valid": [True] * turns,
    }
    if layout == "per_step":
        tokens = PROMPT + MODEL
        spans = [TurnSpan("prompt", 0, 2), TurnSpan("model", 2, 4)]
        return [
            Trajectory(
                token_ids=tokens,
                loss_mask=[0, 0, 1, 1],
                logprobs=[0.0, 0.0, -1.0, -1.0],
                spans=spans,
                step=t,
                **record,
            )
            for t in range(turns)
        ]
    tokens, mask, spans = list(PROMPT), [0, 0], [TurnSpan("prompt", 0, 2)]
    for t in range(turns):
        spans.append(TurnSpan("model", len(tokens), len(tokens) + 2))
        tokens += MODEL
        mask += [1, 1]
        if t < turns - 1:
            spans.append(TurnSpan("env", len(tokens), len(tokens) + 1))
            tokens += BRIDGE
            mask += [0]
    logprobs = [-1.0 if m else 0.0 for m in mask]
    return [Trajectory(token_ids=tokens, loss_mask=mask, logprobs=logprobs, spans=spans, **record)]


def _batch(layout: str) -> list[Trajectory]:
    """Task 0: three attempts that all start in S0; attempt 0 comes back to S1 (its turn 2 acts in
    the state its turn 1 acted in), attempt 2 reaches S1 too, attempt 1 alone sees S2 (a
    singleton). Task 1: two identical attempts (every return equal), starting in a state whose
    text is task 0's S0, which must not join task 0's anchor group."""
    return [
        *_attempt(0, 0, ["S0", "S1", "S1"], won_at=2, layout=layout),
        *_attempt(0, 1, ["S0", "S2"], won_at=None, layout=layout),
        *_attempt(0, 2, ["S0", "S1"], won_at=1, layout=layout),
        *_attempt(1, 3, ["S0", "T1"], won_at=1, layout=layout),
        *_attempt(1, 4, ["S0", "T1"], won_at=1, layout=layout),
    ]


# Hand computation with gamma = 0.5, outcome "success" (the reward on the winning turn):
#   per-turn rewards  a0 [0, 0, 1]   a1 [0, 0]   a2 [0, 1]
#   returns G         a0 [0.25, 0.5, 1]   a1 [0, 0]   a2 [0.5, 1]
#   anchor groups     S0 {a0t0 .25, a1t0 0, a2t0 .5}: mean .25, sample std .25
#                     S1 {a0t1 .5, a0t2 1, a2t1 1}: mean 5/6, sample std sqrt(1/12)
#                     S2 {a1t1 0}: singleton
#   step "mean":      S0 [0, -.25, .25]   S1 [-1/3, 1/6, 1/6]   S2 0
#   step "std":       S0 [0, -1, 1]       S1 [-2/sqrt(3), 1/sqrt(3), 1/sqrt(3)]
#   episode (GRPO, norm_std False): rewards [1, 0, 1], mean 2/3 -> [1/3, -2/3, 1/3]
#   task 1: both attempts G = [0.5, 1], rewards equal: every advantage exactly 0
R3 = 1 / math.sqrt(3)
STEP_MEAN = {0: [0.0, -1 / 3, 1 / 6], 1: [-0.25, 0.0], 2: [0.25, 1 / 6], 3: [0.0, 0.0], 4: [0.0, 0.0]}
STEP_STD = {0: [0.0, -2 * R3, R3], 1: [-1.0, 0.0], 2: [1.0, R3], 3: [0.0, 0.0], 4: [0.0, 0.0]}
EPISODE = {0: 1 / 3, 1: -2 / 3, 2: 1 / 3, 3: 0.0, 4: 0.0}
OMEGA = 0.5


def _turn_values(trajectory: Trajectory, series: torch.Tensor) -> list[float]:
    """The value ``series`` holds on each turn's model tokens (checking a turn's tokens agree)."""
    spans = [trajectory.spans[-1]] if trajectory.step is not None else trajectory.model_spans()
    values = []
    for span in spans:
        on_span = series[span.start : span.end]
        assert torch.all(on_span == on_span[0])
        values.append(float(on_span[0]))
    return values


def _by_turn(prepared, series: list[torch.Tensor]) -> dict[int, list[float]]:
    """Episode id -> the series' value on each of its turns, from either layout."""
    out: dict[int, dict[int, float]] = {}
    for trajectory, values in zip(prepared.trajectories, series):
        turns = out.setdefault(trajectory.episode_id, {})
        first = trajectory.step or 0
        for k, value in enumerate(_turn_values(trajectory, values)):
            turns[first + k] = value
    return {episode: [turns[t] for t in sorted(turns)] for episode, turns in out.items()}


@pytest.mark.parametrize("layout", ["sequence", "per_step"])
@pytest.mark.parametrize(("step_norm", "expected"), [("mean", STEP_MEAN), ("std", STEP_STD)])
def test_hand_built_groups_give_the_hand_computed_advantages(policy, layout, step_norm, expected):
    config = {"gamma": 0.5, "omega": OMEGA, "step_norm": step_norm, "norm_std": False, "eps": 1e-12}
    prepared = make_algorithm("gigpo", config).prepare(
        _batch(layout), policy, iteration=0, rng=np.random.default_rng(0)
    )
    step = _by_turn(prepared, prepared.token_extras["gigpo_step_advantage"])
    total = _by_turn(prepared, prepared.advantages)
    for episode, values in expected.items():
        np.testing.assert_allclose(step[episode], values, atol=1e-6)
        np.testing.assert_allclose(total[episode], [EPISODE[episode] + OMEGA * v for v in values], atol=1e-6)
    # The episode term is GRPO's own, untouched.
    np.testing.assert_allclose(_by_turn(prepared, prepared.outcome_advantages)[1], [-2 / 3, -2 / 3], atol=1e-6)
    for trajectory, advantage in zip(prepared.trajectories, prepared.advantages):
        mask = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
        assert torch.all(advantage[~mask] == 0)  # prompt and observation tokens
        if trajectory.group_id == 1:
            assert torch.all(advantage == 0)  # all-equal returns and rewards: no signal at any level


def test_metrics_and_audit_of_the_hand_built_groups(policy):
    config = {"gamma": 0.5, "step_norm": "std", "eps": 1e-12}
    prepared = make_algorithm("gigpo", config).prepare(_batch("sequence"), policy, iteration=0, rng=None)
    metrics = prepared.metrics
    # 11 turns; all but attempt 1's S2 share a state: 10 anchored, in 5 states (S0, S1, S2; S0, T1).
    assert metrics["gigpo/anchored_turn_frac"] == pytest.approx(10 / 11)
    assert metrics["gigpo/anchor_group_size"] == pytest.approx(11 / 5)
    assert metrics["gigpo/step_adv_abs_mean"] == pytest.approx((0 + 1 + 1 + 2 * R3 + R3 + R3) / 11)
    # norm_std (GRPO's default): task 0's rewards [1, 0, 1] give +-1/sqrt(3)*[1, -2, 1], over 3 + 2 + 2 turns.
    assert metrics["gigpo/episode_adv_abs_mean"] == pytest.approx((3 * R3 + 2 * 2 * R3 + 2 * R3) / 11)
    assert metrics["zero_adv_group_frac"] == 0.5  # GRPO's metrics stay
    task0, task1 = prepared.audit
    assert (task0["group_id"], task0["task_key"], task0["turns"], task0["anchored_turns"]) == (0, "task-0", 7, 6)
    assert [(g["state"], g["turns"]) for g in task0["anchor_groups"]] == [
        ("S0", [[0, 0], [1, 0], [2, 0]]),
        ("S1", [[0, 1], [0, 2], [2, 1]]),
    ]
    assert task0["anchor_groups"][0]["returns"] == [0.25, 0.0, 0.5]
    assert task1["anchored_turns"] == 4 and all(a == 0 for g in task1["anchor_groups"] for a in g["step_advantages"])
    json.dumps(prepared.audit)


class _Recorded:
    """A worker's peers that hand back what the other worker gathered, as `Workers.all_gather` would."""

    def __init__(self, other=None):
        self.other, self.sent = other, None

    def all_gather(self, value):
        self.sent = value
        return [value] if self.other is None else [value, self.other]


def test_two_workers_holding_one_task_each_prepare_what_one_process_does(policy):
    """Anchor groups stay within a task's group, which a data-parallel worker holds whole, and the
    anchor metrics pool every worker's turns."""
    batch = _batch("per_step")
    algo = make_algorithm("gigpo", {"gamma": 0.5})
    whole = algo.prepare(batch, policy, iteration=0, rng=None)
    second = _Recorded()
    algo.prepare([t for t in batch if t.group_id == 1], policy, iteration=0, rng=None, peers=second)
    first = algo.prepare(
        [t for t in batch if t.group_id == 0], policy, iteration=0, rng=None, peers=_Recorded(second.sent)
    )
    for mine, theirs in zip(first.advantages, whole.advantages):
        assert torch.equal(mine, theirs)
    assert {k: v for k, v in first.metrics.items() if k.startswith("gigpo/")} == pytest.approx(
        {k: v for k, v in whole.metrics.items() if k.startswith("gigpo/")}
    )


def test_discounted_returns_and_singleton_and_equal_anchor_groups():
    np.testing.assert_allclose(discounted_returns([0.0, -0.1, 1.0], 0.95), [-0.095 + 0.9025, -0.1 + 0.95, 1.0])
    assert discounted_returns([], 0.95).size == 0
    advantages = step_advantages([0.3, 1.0, 0.7, 0.7], ["a", "b", "c", "c"])
    assert np.all(advantages == 0.0)  # two singletons and one state whose returns are equal


def test_turn_rewards_sum_to_the_episode_reward_and_sit_where_they_were_paid():
    [won] = _attempt(0, 0, ["S0", "S1", "S2"], won_at=1, layout="sequence")  # won, then acted once more
    won.infos[3] = {"won": True, "is_valid_action": False, NO_PROGRESS: True}
    won.rewards = [0.0, 1.0, 0.0]
    success = RewardConfig(success_reward=2.0, invalid_action_penalty=0.1, no_progress_penalty=0.25)
    assert turn_rewards(won, success) == pytest.approx([0.0, 2.0, -0.25])
    ret = RewardConfig(outcome="return", invalid_action_penalty=0.1)
    won.rewards = [0.2, 0.3, 0.0]
    assert turn_rewards(won, ret) == pytest.approx([0.2, 0.3, -0.1])
    for config in (success, ret):
        assert sum(turn_rewards(won, config)) == pytest.approx(trajectory_reward(won, config))
    [lost] = _attempt(0, 1, ["S0", "S1"], won_at=None, layout="sequence")
    assert turn_rewards(lost, RewardConfig()) == [0.0, 0.0]


def test_a_turn_without_its_tokens_is_refused():
    [trajectory] = _attempt(0, 0, ["S0", "S1"], won_at=1, layout="sequence")
    assert turn_token_values(trajectory, [1.0, -1.0]).tolist() == [0, 0, 1, 1, 0, -1, -1]
    with pytest.raises(ValueError, match="2 model spans for 3 turns"):
        turn_token_values(trajectory, [1.0, -1.0, 0.5])


class _CountedRoom(TextEnv):
    """An env whose observation carries a step counter that is not state: it says so."""

    tasks = ("the room",)

    def _task_text(self, task_id):
        return "Wait in the room."

    def _start_task(self, task_id, options):
        self.turn = 0
        return "Step 0: a room.", {}

    def _play(self, action):
        self.turn += 1
        return StepOutcome(f"Step {self.turn}: a room.")

    @classmethod
    def state_key(cls, observation, info):
        return observation.partition(": ")[2]


COUNTED_ROOM = register_text_env("GiGPOCountedRoom", _CountedRoom, max_episode_steps=3, description="test env")


def test_an_env_says_what_keys_its_states(policy):
    """The env's own `state_key` decides the anchor groups: its counter does not split a state."""
    batch = [
        *_attempt(0, 0, ["Step 0: a room.", "Step 1: a room."], won_at=1, layout="sequence", env_id=COUNTED_ROOM),
        *_attempt(0, 1, ["Step 0: a room.", "Step 1: a hall."], won_at=None, layout="sequence", env_id=COUNTED_ROOM),
    ]
    prepared = make_algorithm("gigpo").prepare(batch, policy, iteration=0, rng=None)
    [record] = prepared.audit
    assert [(g["state"], g["turns"]) for g in record["anchor_groups"]] == [("a room.", [[0, 0], [0, 1], [1, 0]])]
    generic = [t for t in _batch("sequence") if t.group_id == 1]
    assert make_algorithm("gigpo").prepare(generic, policy, iteration=0, rng=None).audit[0]["anchored_turns"] == 4


def test_gigpo_is_registered_on_grpo_and_validates_its_settings():
    assert algorithm_config_class("gigpo") is GiGPOConfig
    algo = make_algorithm("gigpo", {"gamma": 0.9, "omega": 2.0, "kl_coef": 0.0, "reward": {"outcome": "return"}})
    assert (algo.config.gamma, algo.config.omega, algo.config.reward.outcome) == (0.9, 2.0, "return")
    assert GiGPOConfig().gamma == 0.95 and GiGPOConfig().omega == 1.0
    with pytest.raises(ValueError, match="gamma"):
        GiGPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match="omega"):
        GiGPOConfig(omega=-1.0)
    assert algo.state_dict() == {}  # nothing to checkpoint: a resumed run prepares as before
    algo.load_state_dict({})


def test_grpo_settings_reach_gigpo_runs():
    from orsd_gym.train.config import load_config, resolve_algo

    config = load_config(
        None, ["algo.name=gigpo", "algo.per_algo.grpo.kl_coef=0.01", "algo.per_algo.gigpo.step_norm=mean"]
    )
    settings = resolve_algo(config)
    assert isinstance(settings, GiGPOConfig) and settings.kl_coef == 0.01 and settings.step_norm == "mean"


@pytest.mark.parametrize("layout", ["sequence", "per_step"])
def test_gigpo_on_collector_rollouts(policy, layout):
    """The collector's real layouts: each turn's step advantage lands on that turn's sampled
    tokens, and GRPO's loss takes the batch."""
    from orsd_gym.policies.base import SamplingParams
    from orsd_gym.rollout.collector import collect
    from orsd_gym.rollout.options import RolloutOptions

    trajectories = collect(
        "orsd_gym/GuessNumber-v0",
        policy,
        [0, 1],
        group_size=3,
        sampling=SamplingParams(max_new_tokens=6, temperature=1.0, seed=0),
        options=RolloutOptions(max_turns=3, layout=layout, history=1),
    )
    # A random model never guesses: every turn is invalid, and each penalty is discounted differently
    # by the turns left, so a state revisited at turns 1 and 2 gets returns that differ.
    algo = make_algorithm("gigpo", {"reward": {"invalid_action_penalty": 0.1}})
    prepared = algo.prepare(trajectories, policy, iteration=0, rng=np.random.default_rng(0))
    for record in prepared.audit:  # the attempts at a task start from its one reset observation
        first = next(g for g in record["anchor_groups"] if [0, 0] in g["turns"])
        assert [attempt for attempt, turn in first["turns"] if turn == 0] == [0, 1, 2]
    assert prepared.metrics["gigpo/step_adv_abs_mean"] > 0
    steps = prepared.token_extras["gigpo_step_advantage"]
    for trajectory, advantage, outcome, step in zip(
        trajectories, prepared.advantages, prepared.outcome_advantages, steps
    ):
        torch.testing.assert_close(advantage, outcome + algo.config.omega * step)
        assert torch.all(step[torch.tensor(trajectory.loss_mask) == 0] == 0)
        assert len(_turn_values(trajectory, step)) == (1 if layout == "per_step" else trajectory.num_turns)
    loss, metrics = algo.loss(policy, prepared, [0, 1], minibatch_indices=list(range(len(trajectories))))
    loss.backward()
    assert torch.isfinite(loss) and metrics["tokens"] > 0
    for parameter in policy.trainable_parameters():
        parameter.grad = None


def test_the_credit_view_shows_the_step_advantage_and_the_advantage(policy, tmp_path):
    """An audit of a GiGPO batch, as the trainer writes it, read back by `orsd-gym inspect`."""
    from orsd_gym.errors import AuditNotFoundError
    from orsd_gym.experiments.credit import load_credit, render_html
    from orsd_gym.train.records import write_audit

    prepared = make_algorithm("gigpo", {"gamma": 0.5, "omega": OMEGA, "norm_std": False, "step_norm": "mean"}).prepare(
        _batch("sequence"), policy, iteration=0, rng=None
    )
    write_audit(tmp_path / "audit" / "iter_000001", [prepared])
    view = load_credit(tmp_path, 1, 0, policy.tokenizer)  # attempt 0: turns in S0, S1, S1
    assert view.shading == "gigpo_step_advantage" and not view.has_rubric
    sampled = [token for token in view.tokens if token.kind == "model"]
    assert [token.delta for token in sampled] == pytest.approx([0, 0, -1 / 3, -1 / 3, 1 / 6, 1 / 6], abs=1e-6)
    assert view.grpo_advantage == pytest.approx(1 / 3)
    page = render_html(view)
    assert "gigpo_step_advantage -0.3333" in page and "Rubric" not in page
    advantage = load_credit(tmp_path, 1, 0, policy.tokenizer, colour_by="advantages")
    expected = [1 / 3 + OMEGA * v for v in STEP_MEAN[0] for _ in MODEL]
    assert [t.delta for t in advantage.tokens if t.kind == "model"] == pytest.approx(expected, abs=1e-6)
    with pytest.raises(AuditNotFoundError, match="no per-token series 'orsd_delta'.*gigpo_step_advantage"):
        load_credit(tmp_path, 1, 0, policy.tokenizer, colour_by="orsd_delta")


def test_algos_lists_gigpo(capsys):
    from orsd_gym.cli import main

    assert main(["algos", "--names"]) == 0
    assert capsys.readouterr().out.split() == ["gigpo", "grpo", "orsd"]
    assert main(["algos"]) == 0
    assert "Group-in-Group" in capsys.readouterr().out


def test_compare_grpo_and_gigpo_on_guess_number(tmp_path):
    """``orsd-gym compare --algos grpo,gigpo`` on GuessNumber, at tiny size: both arms train on the
    same tasks and the report shows GiGPO's anchor states."""
    from orsd_gym.cli import main

    out = tmp_path / "report"
    args = ["compare", "--config", "text_env_cpu", "--env", "orsd_gym/GuessNumber-v0", "--algos", "grpo,gigpo"]
    args += ["--seeds", "1", "--out", str(out), "--no-live", "--threads", "1", "model.name=tiny-random"]
    args += ["train.iterations=1", "rollout.tasks_per_iteration=2", "rollout.group_size=2", "rollout.max_turns=3"]
    args += [
        "rollout.max_new_tokens=6",
        "eval.every=1",
        "eval.num_tasks=1",
        "algo.per_algo.grpo.reward.format_penalty=0.1",
    ]
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["algos"] == ["grpo", "gigpo"]
    run = results["runs"]["gigpo-seed0"]
    assert 0 < run["gigpo_anchored_turn_frac"] <= 1 and run["gigpo_anchor_group_size"] >= 1
    assert results["runs"]["grpo-seed0"]["gigpo_anchored_turn_frac"] is None
    assert "Share of GiGPO's training turns in an anchor group" in (out / "report.md").read_text()
    plans = [json.loads((out / "runs" / f"{arm}-seed0" / "task_plan.json").read_text()) for arm in ("grpo", "gigpo")]
    assert plans[0]["keys"] == plans[1]["keys"]


@pytest.mark.slow
def test_compare_grpo_and_gigpo_on_the_demo_preset(tmp_path):
    """The demo preset (generated ALFWorld rooms, a cloned warm start shared by both arms) at tiny size."""
    pytest.importorskip("textworld")
    from orsd_gym.cli import main

    out = tmp_path / "demo"
    args = ["compare", "--config", "demo", "--algos", "grpo,gigpo", "--seeds", "1", "--out", str(out), "--no-live"]
    args += ["--threads", "1", "model.name=tiny-random", "train.iterations=1"]
    args += ["rollout.tasks_per_iteration=1", "rollout.group_size=2", "eval.num_tasks=1"]
    args += ["warm_start.episodes=1", "warm_start.epochs=1"]
    assert main(args) == 0
    run = json.loads((out / "results.json").read_text())["runs"]["gigpo-seed0"]
    # The group's attempts start in one room: its first turns are one anchor group at least.
    assert run["gigpo_anchored_turn_frac"] >= 0.5


def test_the_anchor_share_study_script_runs(tmp_path):
    """benchmarks/studies/gigpo_anchor_share.py at tiny size: it counts every played turn once."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "gigpo_anchor_share.py"
    out = tmp_path / "share.json"
    args = [sys.executable, str(script), "--config", "text_env_cpu", "--threads", "1", "--out", str(tmp_path)]
    args += ["--json", str(out), "model.name=tiny-random", "rollout.tasks_per_iteration=2", "rollout.group_size=2"]
    args += ["rollout.max_turns=2", "rollout.max_new_tokens=4"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(out.read_text())
    assert (record["groups"], record["episodes"]) == (4, 8)
    for name in ("env_key", "observation", "observation_and_admissible"):
        counts = record["keys"][name]
        assert counts["turns"] == round(record["episodes"] * record["mean_turns"])
        assert counts["anchored"] >= record["episodes"]  # the attempts at a task share its reset observation
    assert record["gigpo_metrics"]["gigpo/anchored_turn_frac"] == record["keys"]["env_key"]["anchored_turn_frac"]


def test_alfworld_keys_a_state_by_its_observation_and_admissible_actions():
    """ALFWorld's text narrates the last action ("Nothing happens.", "You arrive at ..."): the
    admissible actions beside it tell states apart that the text alone conflates."""
    from orsd_gym.envs.presentation import state_key_for

    key = state_key_for("orsd_gym/ALFWorld-v0")
    arrive = "You arrive at countertop 1. On the countertop 1, you see a apple 1."
    empty_handed = key(arrive, {"admissible_actions": ["take apple 1 from countertop 1", "look"]})
    assert key(arrive, {"admissible_actions": ["look", "take apple 1 from countertop 1"]}) == empty_handed
    assert key(arrive, {"admissible_actions": ["look", "put mug 1 in/on countertop 1"]}) != empty_handed
    assert state_key_for("orsd_gym/WebShop-v0")("a page", {"admissible_actions": ["x"]}) == "a page"
