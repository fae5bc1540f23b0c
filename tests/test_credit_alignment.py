"""Credit alignment on hand-made trajectories, in the sequence and the per-step layout."""

from __future__ import annotations

import pytest
import torch

from orsd_gym.algos.orsd.alignment import credit_alignment
from orsd_gym.errors import AlignmentLayoutError
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.rollout.trajectory import Trajectory, TurnSpan


def make(
    spans: list[tuple[str, int, int]],
    actions: list[str],
    plans: list[list[str] | None],
    *,
    step: int | None = None,
    episode_id: int = 0,
) -> Trajectory:
    length = spans[-1][2]
    mask = [0] * length
    for kind, start, end in spans:
        if kind == "model":
            mask[start:end] = [1] * (end - start)
    infos = [{} if plan is None else {"expert_actions": plan} for plan in plans]
    return Trajectory(
        token_ids=list(range(length)),
        loss_mask=mask,
        logprobs=[0.0] * length,
        spans=[TurnSpan(k, s, e) for k, s, e in spans],
        rewards=[0.0] * len(actions),
        infos=infos,
        model_turns=list(actions),
        actions=list(actions),
        observations=[""] * (len(actions) + 1),
        task="t",
        prompt_messages=[],
        env_id="e",
        task_id=0,
        seed=0,
        group_id=0,
        episode_id=episode_id,
        step=step,
    )


# prompt [0, 3), action 0 [3, 5), obs [5, 7), action 1 [7, 10), obs [10, 11), action 2 [11, 13)
SEQUENCE_SPANS = [
    ("prompt", 0, 3),
    ("model", 3, 5),
    ("env", 5, 7),
    ("model", 7, 10),
    ("env", 10, 11),
    ("model", 11, 13),
]
ACTIONS = ["go to desk 1", "open drawer 1", "take pen 1 from desk 1"]
# The expert's plan before each action (None: no plan in that info, e.g. expert="reset" later on).
PLANS = [["go to desk 1", "take pen 1 from desk 1"], ["take pen 1 from desk 1"], None]


def test_sequence_layout_separates_agreeing_from_other_actions():
    trajectory = make(SEQUENCE_SPANS, ACTIONS, PLANS + [[]])
    delta = torch.tensor([9.0, 9.0, 9.0, 0.2, 0.4, 5.0, 5.0, -0.1, -0.1, -0.1, 7.0, 3.0, 3.0])
    result = credit_alignment([trajectory], [delta])
    assert result["agree_mean"] == pytest.approx(0.3) and result["other_mean"] == pytest.approx(-0.1)
    assert result["alignment"] == pytest.approx(0.4)
    assert (result["agree_tokens"], result["other_tokens"]) == (2, 3)
    assert (result["agree_actions"], result["other_actions"], result["unknown_actions"]) == (1, 1, 1)
    assert result["abs_mean"] == pytest.approx(0.9 / 5)


def test_tokens_are_pooled_across_trajectories_and_case_is_ignored():
    shop = make(
        [("prompt", 0, 2), ("model", 2, 3), ("env", 3, 4), ("model", 4, 6)],
        ["click[B0743JKHBV]", "click[buy now]"],
        [["click[b0743jkhbv]"], ["click[red]", "click[buy now]"]],
        episode_id=1,
    )
    sequence = make(SEQUENCE_SPANS, ACTIONS, PLANS)
    deltas = [torch.tensor([0.0, 0.0, 1.0, 0.0, -1.0, -1.0]), torch.zeros(13)]
    result = credit_alignment([shop, sequence], deltas)
    assert (result["agree_tokens"], result["other_tokens"]) == (3, 5)
    assert result["agree_mean"] == pytest.approx(1.0 / 3) and result["other_mean"] == pytest.approx(-2.0 / 5)


def test_per_step_samples_hold_one_action_each():
    steps = [
        make([("prompt", 0, 4), ("model", 4, 6)], ACTIONS, PLANS, step=0),
        make([("prompt", 0, 5), ("model", 5, 8)], ACTIONS, PLANS, step=1),
        make([("prompt", 0, 3), ("model", 3, 4)], ACTIONS, PLANS, step=2),
    ]
    deltas = [
        torch.tensor([0, 0, 0, 0, 0.5, 0.5]),
        torch.tensor([0, 0, 0, 0, 0, -0.2, -0.2, -0.2]),
        torch.tensor([0, 0, 0, 4.0]),
    ]
    result = credit_alignment(steps, deltas)
    assert result["alignment"] == pytest.approx(0.7)
    assert (result["agree_actions"], result["other_actions"], result["unknown_actions"]) == (1, 1, 1)


def test_an_empty_side_gives_none():
    agreeing_only = make(SEQUENCE_SPANS[:2], ACTIONS[:1], PLANS[:1])
    result = credit_alignment([agreeing_only], [torch.ones(5)])
    assert result["agree_mean"] == 1.0 and result["other_mean"] is None and result["alignment"] is None
    assert credit_alignment([], [])["alignment"] is None


def test_layout_mismatches_are_reported():
    trajectory = make(SEQUENCE_SPANS, ACTIONS, PLANS)
    with pytest.raises(AlignmentLayoutError, match="13 tokens"):
        credit_alignment([trajectory], [torch.zeros(12)])
    missing_turn = make(SEQUENCE_SPANS[:4], ACTIONS, PLANS)
    with pytest.raises(AlignmentLayoutError, match="2 model spans but 3 actions"):
        credit_alignment([missing_turn], [torch.zeros(10)])
    two_spans_per_step = make(SEQUENCE_SPANS[:4], ACTIONS, PLANS, step=0)
    with pytest.raises(AlignmentLayoutError, match="per-step sample 0"):
        credit_alignment([two_spans_per_step], [torch.zeros(10)])
    with pytest.raises(ValueError, match="1 trajectories but 0"):
        credit_alignment([trajectory], [])


@pytest.mark.parametrize("layout", ["sequence", "per_step"])
def test_collected_alfworld_rollouts_align_in_both_layouts(policy, tmp_path, layout):
    """Real rollouts (expert=True): every action is on one side, and the expert's own actions agree."""
    pytest.importorskip("textworld")
    import gymnasium as gym

    import orsd_gym  # noqa: F401
    from orsd_gym.rollout.collector import EnvSetup, Teacher, collect, expert_teacher

    env = gym.make(
        "orsd_gym/ALFWorld-v0",
        expert=True,
        cache_dir=str(tmp_path),
        recycle_after=None,
        task_types=["pick_and_place_simple"],
        generator={"num_tasks": 2, "max_receptacles": 2, "num_distractors": 0},
    )
    options = RolloutOptions(layout=layout, action_format="admissible", max_turns=4)
    one_at_a_time = EnvSetup(env, num_envs=1)
    sampled = collect(one_at_a_time, policy, [0], group_size=2, options=options)
    demos = collect(one_at_a_time, Teacher(policy, expert_teacher), [1], group_size=1, options=options)
    env.close()
    ones = [torch.as_tensor(t.loss_mask, dtype=torch.float32) for t in sampled]
    result = credit_alignment(sampled, ones)
    steps = sum(len(t.actions) for t in sampled) if layout == "sequence" else len(sampled)
    assert result["agree_actions"] + result["other_actions"] + result["unknown_actions"] == steps
    assert result["agree_tokens"] + result["other_tokens"] == sum(sum(t.loss_mask) for t in sampled)
    expert = credit_alignment(demos, [torch.as_tensor(t.loss_mask, dtype=torch.float32) for t in demos])
    assert expert["agree_actions"] == len(demos[0].actions) and expert["other_actions"] == 0
    assert expert["agree_mean"] == 1.0 and expert["alignment"] is None
