"""GRPO equations against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from orsd_gym.algos import GRPOConfig, algorithm_config_class, make_algorithm
from orsd_gym.algos.base import coerce_config
from orsd_gym.algos.grpo import (
    aggregate,
    broadcast_advantage,
    group_advantages,
    kl_k3,
    minibatch_normaliser,
    ppo_clip_loss,
)
from orsd_gym.algos.rewards import RewardConfig, trajectory_reward, turn_penalties
from orsd_gym.envs.base import NO_PROGRESS
from orsd_gym.errors import ConfigError, UnknownAlgorithmError
from orsd_gym.rollout.trajectory import Trajectory, TurnSpan


def test_group_advantage_std_normalised():
    # mean 0.5, sample std sqrt(1/3) -> +-0.5 / 0.57735 = +-0.866025
    adv = group_advantages([1, 0, 0, 1], norm_std=True, eps=1e-12)
    np.testing.assert_allclose(adv, [0.8660254, -0.8660254, -0.8660254, 0.8660254], rtol=1e-6)


def test_group_advantage_without_std_is_centring_only():
    np.testing.assert_allclose(group_advantages([1, 0, 0, 0], norm_std=False), [0.75, -0.25, -0.25, -0.25])


@pytest.mark.parametrize("rewards", [[0.3, 0.3, 0.3], [1.0, 1.0], [0.0], [0.1 * 3] * 5])
def test_all_equal_groups_give_exactly_zero(rewards):
    adv = group_advantages(rewards)
    assert np.all(adv == 0.0)


def test_group_advantage_rejects_nan():
    with pytest.raises(ValueError, match="finite"):
        group_advantages([1.0, float("nan")])


def test_broadcast_only_on_mask_one_tokens():
    out = broadcast_advantage(-0.5, [0, 0, 1, 1, 0, 1])
    assert out.dtype == torch.float32
    assert out.tolist() == [0, 0, -0.5, -0.5, 0, -0.5]


def test_ppo_clip_hand_values():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, clipped = ppo_clip_loss(new, old, adv, 0.2, 0.2)
    # r=1.5,A=+1: -min(1.5, 1.2) = -1.2 (clipped); r=1.5,A=-1: -min(-1.5,-1.2) = 1.5
    # r=0.5,A=+1: -min(0.5, 0.8) = -0.5;            r=0.5,A=-1: -min(-0.5,-0.8) = 0.8 (clipped)
    torch.testing.assert_close(loss, torch.tensor([-1.2, 1.5, -0.5, 0.8]))
    assert clipped.tolist() == [True, False, False, True]


def test_ppo_clip_asymmetric_range_and_gradient():
    new = torch.log(torch.tensor([1.25])).requires_grad_()
    loss, clipped = ppo_clip_loss(new, torch.zeros(1), torch.ones(1), 0.2, 0.28)
    assert not clipped.item()  # 1.25 < 1.28: inside the higher clip
    loss.sum().backward()
    assert new.grad.item() == pytest.approx(-1.25)  # d(-r)/dlogp = -r


def test_kl_k3_hand_value_and_unbiasedness():
    value = kl_k3(torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25])))
    assert value.item() == pytest.approx(0.5 - math.log(0.5) - 1)  # 0.193147
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.2, 0.6])
    expected = float((p * (p / q).log()).sum())  # exact KL(p||q)
    estimate = float((p * kl_k3(p.log(), q.log())).sum())  # E_p[k3]
    assert estimate == pytest.approx(expected, rel=1e-6)
    assert torch.all(kl_k3(p.log(), q.log()) >= 0)


def test_aggregations_hand_values_and_micro_batch_split():
    losses = [torch.tensor([1.0, 2.0, 100.0]), torch.tensor([4.0])]
    masks = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0])]
    token_norm = minibatch_normaliser([[1, 1, 0], [1]], "token-mean")
    seq_norm = minibatch_normaliser([[1, 1, 0], [1]], "seq-mean-token-mean")
    assert (token_norm, seq_norm) == (3.0, 2.0)
    assert aggregate(losses, masks, "token-mean", token_norm).item() == pytest.approx(7 / 3)
    assert aggregate(losses, masks, "seq-mean-token-mean", seq_norm).item() == pytest.approx((1.5 + 4) / 2)
    for mode, norm in (("token-mean", token_norm), ("seq-mean-token-mean", seq_norm)):
        split = aggregate(losses[:1], masks[:1], mode, norm) + aggregate(losses[1:], masks[1:], mode, norm)
        assert split.item() == pytest.approx(aggregate(losses, masks, mode, norm).item())


def test_aggregate_of_no_tokens_is_zero_not_nan():
    assert aggregate([torch.zeros(2)], [torch.zeros(2)], "seq-mean-token-mean", 1.0).item() == 0.0
    assert aggregate([torch.zeros(2)], [torch.zeros(2)], "token-mean", 0.0).item() == 0.0


def _trajectory(success: bool, valid: list[bool], fmt: list[bool]) -> Trajectory:
    return Trajectory(
        token_ids=[1, 2],
        loss_mask=[0, 1],
        logprobs=[0.0, -1.0],
        spans=[TurnSpan("prompt", 0, 1)],
        rewards=[0.0] * len(valid),
        infos=[{"is_valid_action": True}] + [{"is_valid_action": v} for v in valid],
        model_turns=[],
        actions=[],
        observations=[],
        task="t",
        prompt_messages=[],
        env_id="e",
        task_id=0,
        seed=0,
        group_id=0,
        episode_id=0,
        success=success,
        format_valid=fmt,
    )


def test_reward_config_penalties():
    traj = _trajectory(True, [True, False, False], [True, False, True])
    assert trajectory_reward(traj, RewardConfig()) == 1.0
    cfg = RewardConfig(success_reward=2.0, invalid_action_penalty=0.1, format_penalty=0.25)
    # Turn 2 is unparsable and rejected by the env: one bad turn, one (the larger) penalty.
    assert trajectory_reward(traj, cfg) == pytest.approx(2.0 - 0.25 - 0.1)
    unparsable_only = RewardConfig(invalid_action_penalty=0.1)
    assert trajectory_reward(traj, unparsable_only) == pytest.approx(1.0 - 0.1 - 0.1)
    assert trajectory_reward(_trajectory(False, [True], [True]), cfg) == 0.0
    with pytest.raises(ValueError, match="magnitudes"):
        RewardConfig(invalid_action_penalty=-1)


def test_no_progress_penalty_charges_a_repeated_action_that_changed_nothing():
    # Turns: progress; invalid (not a repeat); a valid repeat on an unchanged page; an invalid repeat.
    traj = _trajectory(False, [True, False, True, False], [True] * 4)
    traj.infos = [{"is_valid_action": True}] + [
        {"is_valid_action": valid, NO_PROGRESS: repeated}
        for valid, repeated in [(True, False), (False, False), (True, True), (False, True)]
    ]
    cfg = RewardConfig(outcome="return", invalid_action_penalty=0.1, no_progress_penalty=0.25)
    assert turn_penalties(traj, cfg) == pytest.approx([0.0, 0.1, 0.25, 0.25])  # neither, invalid, repeat, both: max
    assert turn_penalties(traj, RewardConfig(invalid_action_penalty=0.1)) == pytest.approx([0.0, 0.1, 0.0, 0.1])
    with pytest.raises(ValueError, match="magnitudes"):
        RewardConfig(no_progress_penalty=-0.1)


def test_registry_and_config_validation():
    assert algorithm_config_class("grpo") is GRPOConfig
    algo = make_algorithm(
        "grpo", {"clip_high": 0.28, "loss_agg": "seq-mean-token-mean", "reward": {"format_penalty": 0.1}}
    )
    assert algo.config.clip_high == 0.28 and algo.config.reward.format_penalty == 0.1
    with pytest.raises(ConfigError, match="'clip_hgh'"):
        make_algorithm("grpo", {"clip_hgh": 0.3})
    with pytest.raises(ConfigError, match="reward.succes"):
        make_algorithm("grpo", {"reward": {"succes": 1}})
    with pytest.raises(ConfigError, match="loss_agg"):
        make_algorithm("grpo", {"loss_agg": "sum"})
    with pytest.raises(ConfigError, match="kl_coef"):
        coerce_config(GRPOConfig, {"kl_coef": "a lot"})
    with pytest.raises(UnknownAlgorithmError, match="registered: gigpo, grpo, orsd"):
        make_algorithm("ppo")
    with pytest.raises(ValueError, match="reference"):
        make_algorithm("grpo", {"kl_coef": 0.1})


def test_per_step_samples_share_their_episode_advantage(policy):
    from orsd_gym.algos.grpo import episode_groups

    def sample(group_id, episode_id, step, success):
        t = _trajectory(success, [True], [True])
        t.group_id, t.episode_id, t.step, t.extra = group_id, episode_id, step, {"layout": "per_step"}
        return t

    # group 0: a won episode of 3 steps and a lost one of 1 step; group 1: two 1-step episodes
    trajs = [
        sample(0, 0, 0, True),
        sample(0, 0, 1, True),
        sample(0, 0, 2, True),
        sample(0, 1, 0, False),
        sample(1, 2, 0, True),
        sample(1, 3, 0, True),
    ]
    assert episode_groups(trajs) == {0: [[0, 1, 2], [3]], 1: [[4], [5]]}
    batch = make_algorithm("grpo", {"norm_std": False}).grpo_prepare(trajs, policy)
    # episode-level mean 0.5 (not the sample-level 0.75): +0.5 on every won sample, -0.5 on the lost one
    assert [float(a[1]) for a in batch.advantages] == [0.5, 0.5, 0.5, -0.5, 0.0, 0.0]
    assert batch.metrics["zero_adv_group_frac"] == 0.5
    # Per-episode metrics: 3 of 4 episodes won (per sample it would be 5 of 6).
    assert batch.metrics["reward_mean"] == 0.75
    # Episodes are told apart by episode_id, not by sample order: interleaved samples still group.
    shuffled = [trajs[i] for i in (3, 0, 4, 1, 5, 2)]
    assert episode_groups(shuffled) == {0: [[0], [1, 3, 5]], 1: [[2], [4]]}
