"""GRPO and ORSD end to end on the real `tiny-random` policy."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from algos_helpers import make_group

from orsd_gym.algos import make_algorithm
from orsd_gym.algos.orsd.replay import replay_deltas
from orsd_gym.algos.orsd.shaping import shape_advantages
from orsd_gym.algos.orsd.verifier import Judgement, Verifier
from orsd_gym.errors import ReplayError

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def batch(policy):
    # group 0 and 2: mixed outcomes; group 1: all failed (zero advantage, no rubric)
    return (
        make_group(policy, group_id=0, task_id=0, successes=[True, False, False, True], seed=1)
        + make_group(policy, group_id=1, task_id=1, successes=[False, False, False], seed=2)
        + make_group(policy, group_id=2, task_id=1, successes=[False, True, False], seed=3)
    )


# --------------------------------------------------------------------------- replay


def test_replay_with_empty_rubric_gives_exactly_zero(policy, batch):
    deltas = replay_deltas(policy, batch, [""] * len(batch))
    assert all(torch.equal(d, torch.zeros(len(t.token_ids))) for d, t in zip(deltas, batch))
    # Scoring anyway reproduces the rollout-time log-probs on the right positions: a shifted or
    # misaligned replay would be off by several nats on this near-uniform model.
    forced = replay_deltas(policy, batch, [""] * len(batch), force_score=True)
    assert max(float(d.abs().max()) for d in forced) < 1e-4


def test_replay_with_rubric_changes_model_tokens_only(policy, batch):
    rubric = "- Guesses the middle of the range first\n- Never repeats a guess"
    for placement in ("system", "user"):
        deltas = replay_deltas(policy, batch[:2], [rubric] * 2, placement=placement)
        for delta, trajectory in zip(deltas, batch[:2]):
            mask = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
            assert torch.all(delta[~mask] == 0)
            assert float(delta[mask].abs().max()) > 1e-4


def test_replay_rejects_a_prompt_it_cannot_reproduce(policy, batch):
    broken = batch[0].__class__.from_dict(batch[0].to_dict())
    broken.prompt_messages = [{"role": "user", "content": "something else"}]
    with pytest.raises(ReplayError, match="prompt span"):
        replay_deltas(policy, [broken], ["- x"])


# --------------------------------------------------------------------------- verifier


@pytest.mark.parametrize("scoring", ["prob", "binary"])
def test_verifier_batched_equals_one_by_one(policy, scoring):
    verifier = Verifier(policy, scoring=scoring, chunk_size=64)
    judgements = [
        Judgement("find it", attempt, criterion)
        for attempt in ("> guess 10\n   too high", "> look\n   a long room " * 4)
        for criterion in ("Guesses at most three times", "Reads the feedback", "Opens the fridge first")
    ]
    batched = verifier.score(judgements)
    single = np.array([verifier.score([j])[0] for j in judgements])
    assert batched.shape == (6,) and np.all((batched >= 0) & (batched <= 1))
    np.testing.assert_allclose(batched, single, atol=1e-5)
    if scoring == "prob":
        assert len(set(np.round(batched, 6))) > 1  # the judgement depends on the question


# --------------------------------------------------------------------------- GRPO loss


def test_losses_score_tokens_at_the_temperature_each_sample_records(policy):
    # One home for the temperature: the sample says what it was sampled at, so no algorithm
    # setting can disagree with the rollout's.
    cool = make_group(policy, group_id=0, task_id=0, successes=[True, False, False, True], seed=3, temperature=0.6)
    algo = make_algorithm("grpo", {})
    prepared = algo.prepare(cool, policy, iteration=0, rng=np.random.default_rng(0))
    _, metrics = algo.loss(policy, prepared, [0, 1, 2, 3], minibatch_indices=[0, 1, 2, 3])
    assert abs(metrics["policy/approx_kl_old"]) < 1e-4 and metrics["policy/clip_frac"] == 0.0
    misread = [dataclasses.replace(t, temperature=1.0) for t in cool]
    prepared = algo.prepare(misread, policy, iteration=0, rng=np.random.default_rng(0))
    _, metrics = algo.loss(policy, prepared, [0, 1, 2, 3], minibatch_indices=[0, 1, 2, 3])
    assert abs(metrics["policy/approx_kl_old"]) > 1e-3
    with pytest.raises(ValueError, match="share a sampling temperature"):
        replay_deltas(policy, [cool[0], misread[1]], ["- x", "- y"])


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean"])
def test_grpo_micro_batches_sum_to_the_minibatch_gradient(policy, batch, loss_agg):
    algo = make_algorithm("grpo", {"loss_agg": loss_agg})
    prepared = algo.prepare(batch, policy, iteration=0, rng=np.random.default_rng(0))
    assert prepared.metrics["zero_adv_group_frac"] == pytest.approx(1 / 3)
    minibatch = [0, 1, 2, 4, 7, 8]
    params = policy.trainable_parameters()

    def grads(micro_batches):
        for p in params:
            p.grad = None
        total = 0.0
        for micro in micro_batches:
            loss, metrics = algo.loss(policy, prepared, micro, minibatch_indices=minibatch)
            loss.backward()
            total += float(loss.detach())
            # rollout log-probs are reproduced, so at the first step nothing is clipped
            assert metrics["policy/clip_frac"] == 0.0 and abs(metrics["policy/approx_kl_old"]) < 1e-4
        return total, [p.grad.clone() for p in params]

    whole, g_whole = grads([minibatch])
    split, g_split = grads([[0, 1], [2], [4, 7, 8]])
    assert split == pytest.approx(whole, abs=1e-6)
    for a, b in zip(g_whole, g_split):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    # at ratio 1 the surrogate is -A averaged the chosen way
    masks = [torch.tensor(prepared.trajectories[i].loss_mask, dtype=torch.float32) for i in minibatch]
    advs = [prepared.advantages[i] for i in minibatch]
    if loss_agg == "token-mean":
        expected = -sum(float((a * m).sum()) for a, m in zip(advs, masks)) / sum(float(m.sum()) for m in masks)
    else:
        expected = -np.mean([float((a * m).sum() / m.sum()) for a, m in zip(advs, masks)])
    assert whole == pytest.approx(expected, abs=1e-4)
    for p in params:
        p.grad = None


def test_grpo_kl_and_entropy_terms(policy, batch):
    algo = make_algorithm("grpo", {"kl_coef": 0.5, "entropy_coef": 0.01}, reference=policy.copy_frozen())
    prepared = algo.prepare(batch, policy, iteration=0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="ref_logprobs are not scored yet"):
        algo.loss(policy, prepared, [0, 1], minibatch_indices=[0, 1])
    algo.score_loss_inputs(policy, prepared, [[0, 1], list(range(2, len(batch)))])
    loss, metrics = algo.loss(policy, prepared, [0, 1], minibatch_indices=[0, 1])
    assert metrics["policy/kl_ref"] == 0.0  # same weights as the reference, scored as the loss scores
    assert metrics["policy/entropy"] > 5.0  # a random model over a 49k vocabulary
    assert torch.isfinite(loss)


# --------------------------------------------------------------------------- ORSD


def test_orsd_online_on_a_random_model_counts_malformed_bundles(policy, batch):
    algo = make_algorithm("orsd", {"num_bundles": 2, "proposal_max_new_tokens": 12})
    prepared = algo.prepare(batch, policy, iteration=0, rng=np.random.default_rng(0))
    grpo = make_algorithm("grpo").prepare(batch, policy, iteration=0, rng=np.random.default_rng(0))
    audit = {record["group_id"]: record for record in prepared.audit}
    assert audit[1]["no_rubric_reason"] == "all rewards equal" and audit[1]["bundles"] == []
    # Random tokens are rarely a list: most proposals of the two mixed groups are malformed, and
    # every proposal is counted once, malformed or parsed (a line of words parses as one criterion).
    mixed = [audit[0], audit[2]]
    malformed = sum(record["malformed_bundles"] for record in mixed)
    parsed = sum(len(record["bundles"]) for record in mixed)
    assert all(record["malformed_bundles"] + len(record["bundles"]) == 2 for record in mixed)
    assert malformed >= 3 and prepared.metrics["orsd/malformed_frac"] == malformed / 4
    assert prepared.metrics["orsd/bundles_parsed"] == parsed  # a total (summed over workers)
    # no bundle a verifier prefers: ORSD's advantages are GRPO's
    assert prepared.metrics["orsd/rubric_frac"] == 0.0
    for shaped, plain in zip(prepared.advantages, grpo.advantages):
        assert torch.equal(shaped, plain)
    for key in ("propose", "verify", "select", "replay", "shape", "total"):
        assert prepared.metrics[f"time/orsd_{key}"] >= 0.0
    json.dumps(prepared.audit)


def test_orsd_prepare_and_loss_end_to_end(policy, batch):
    bundles = [["Guesses the middle of the range first", "Reads the feedback"], ["Gives up early"]]
    config = {"rubric_mode": "offline", "min_corr": -1.0, "beta": 0.5, "delta_clip": 2.0}
    algo = make_algorithm("orsd", config, verifier=policy.copy_frozen())
    algo.load_state_dict({"offline_bundles": {"orsd_gym/Test-v0#0": bundles, "orsd_gym/Test-v0#1": bundles[::-1]}})
    prepared = algo.prepare(batch, policy, iteration=3, rng=np.random.default_rng(0))
    audit = {record["group_id"]: record for record in prepared.audit}

    for gid in (0, 2):
        record = audit[gid]
        assert record["iteration"] == 3 and len(record["scores"]) == 2
        assert len(record["scores"][0]) == len(record["attempt_indices"]) == len(record["trajectory_indices"])
        best = max(c for c in record["correlations"] if c is not None)
        assert record["selected_correlation"] == best and record["selected_rubric"] in (bundles + bundles[::-1])
        assert record["delta"]["tokens"] > 0 and record["delta"]["abs_mean"] > 0
    assert audit[1]["selected"] is None
    assert prepared.metrics["orsd/rubric_frac"] == pytest.approx(2 / 3)
    assert prepared.metrics["orsd/abs_delta_mean"] > 0

    grpo_adv = prepared.outcome_advantages
    for i, trajectory in enumerate(prepared.trajectories):
        mask = torch.tensor(trajectory.loss_mask, dtype=torch.float32)
        delta = prepared.token_extras["orsd_delta"][i]
        expected = shape_advantages(grpo_adv[i], delta, mask, 0.5, 2.0)
        torch.testing.assert_close(prepared.advantages[i], expected)
        assert torch.all(prepared.advantages[i][mask == 0] == 0)
        if trajectory.group_id == 1:
            assert torch.all(delta == 0) and torch.all(prepared.advantages[i] == 0)

    params = policy.trainable_parameters()
    for p in params:
        p.grad = None
    loss, metrics = algo.loss(policy, prepared, [0, 1, 2], minibatch_indices=list(range(len(batch))))
    loss.backward()
    assert torch.isfinite(loss) and metrics["tokens"] > 0
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in params)
    for p in params:
        p.grad = None

    state = json.loads(json.dumps(algo.state_dict()))
    restored = make_algorithm("orsd", config)
    restored.load_state_dict(state)
    assert restored.state_dict() == algo.state_dict()


def test_orsd_random_selection_ablation_is_seeded(policy, batch):
    bundles = [["Reads the feedback"], ["Gives up early"], ["Guesses twenty"]]
    picks = []
    for seed in (0, 0, 1, 2, 3):
        algo = make_algorithm("orsd", {"rubric_mode": "offline", "selection": "random"})
        algo.load_state_dict({"offline_bundles": {"orsd_gym/Test-v0#0": bundles, "orsd_gym/Test-v0#1": bundles}})
        prepared = algo.prepare(batch[:4], policy, iteration=0, rng=np.random.default_rng(seed))
        picks.append(prepared.audit[0]["selected"])
    assert picks[0] == picks[1] and all(p in (0, 1, 2) for p in picks)
    assert len(set(picks)) > 1  # the draw follows the rng, not the alignment


@pytest.mark.parametrize("layout", ["sequence", "per_step"])
def test_orsd_on_collector_rollouts(policy, layout):
    """The rollout collector's real layouts replay exactly, and a full ORSD update runs on them."""
    from orsd_gym.policies.base import SamplingParams
    from orsd_gym.rollout.collector import collect
    from orsd_gym.rollout.options import RolloutOptions

    trajectories = collect(
        "orsd_gym/GuessNumber-v0",
        policy,
        [0, 1],
        group_size=3,
        sampling=SamplingParams(max_new_tokens=6, temperature=1.0, seed=0),
        options=RolloutOptions(max_turns=2, layout=layout),
    )
    forced = replay_deltas(policy, trajectories, [""] * len(trajectories), force_score=True)
    assert max(float(d.abs().max()) for d in forced) < 1e-4
    # A random model never wins: the test gives the first attempt of each group a win.
    from orsd_gym.algos.grpo import episode_groups

    won = {i for episodes in episode_groups(trajectories).values() for i in episodes[0]}
    marked = [dataclasses.replace(t, success=i in won) for i, t in enumerate(trajectories)]
    algo = make_algorithm("orsd", {"rubric_mode": "offline", "min_corr": -1.0}, verifier=policy.copy_frozen())
    keys = {t.infos[0]["task_key"] for t in marked}
    algo.load_state_dict({"offline_bundles": {k: [["Guesses the middle first"], ["Reads the hint"]] for k in keys}})
    prepared = algo.prepare(marked, policy, iteration=0, rng=np.random.default_rng(0))
    assert prepared.metrics["orsd/rubric_frac"] == 1.0 and prepared.metrics["orsd/abs_delta_mean"] > 0
    for record in prepared.audit:
        assert len(record["rewards"]) == 3 and len(set(record["rewards"])) == 2
    loss, _ = algo.loss(policy, prepared, [0, 1], minibatch_indices=list(range(len(marked))))
    loss.backward()
    for p in policy.trainable_parameters():
        p.grad = None


def test_proposal_prompt_shrinks_to_its_token_budget(policy, batch):
    from orsd_gym.algos.orsd.groups import Group
    from orsd_gym.envs.alfworld.presentation import ALFWORLD_EXAMPLES

    group = Group(0, [0, 1], [0, 1], batch[0].task, "k", [1.0, 0.0])
    example = ALFWORLD_EXAMPLES[0]
    long_attempts = [
        dataclasses.replace(
            t, actions=[f"look {i}" for i in range(40)], observations=["start"] + [f"room {i} " * 8 for i in range(40)]
        )
        for t in batch[:2]
    ]
    roomy = make_algorithm("orsd", {"attempt_max_steps": 32}).proposer.context(group, long_attempts, example, policy)
    # The worked example takes about 330 tokens of the budget.
    tight = make_algorithm("orsd", {"attempt_max_steps": 32, "proposal_max_context_tokens": 700})
    context = tight.proposer.context(group, long_attempts, example, policy)
    assert len(context) <= 700 < len(roomy)
    assert "steps omitted" in policy.tokenizer.decode(context)
