"""ORSD's pure parts against hand-computed cases: selection, shaping, rubric parsing, rubric insertion."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from orsd_gym.algos.orsd import (
    bundle_correlations,
    parse_criteria,
    rankdata,
    render_attempt,
    select_bundle,
    select_random_bundle,
    shape_advantages,
    spearman,
)
from orsd_gym.algos.orsd.replay import insert_rubric
from orsd_gym.algos.orsd.rubrics import DEFAULT_OFFLINE_PROPOSAL_TEMPLATE, proposal_messages
from orsd_gym.algos.orsd.shaping import centre_delta
from orsd_gym.envs.alfworld.presentation import ALFWORLD_EXAMPLES
from orsd_gym.envs.presentation import example_for, examples_for
from orsd_gym.rollout.trajectory import Trajectory, TurnSpan

# --------------------------------------------------------------------------- ranks and Spearman


def test_rankdata_averages_ties():
    assert rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]
    assert rankdata([1, 1, 1]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_hand_values():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties: x ranks [1.5,1.5,3.5,3.5], y ranks [1,2,3,4] -> centred (-1,-1,1,1)/(-1.5,-.5,.5,1.5)
    # r = 4 / sqrt(4 * 5) = 0.894427
    assert spearman([0, 0, 1, 1], [1, 2, 3, 4]) == pytest.approx(4 / math.sqrt(20))
    assert spearman([0.5, 0.5, 0.5], [0, 1, 1]) is None  # constant scores: undefined, not NaN


def test_select_bundle_picks_best_aligned():
    rewards = [1.0, 0.0, 0.0, 1.0]
    scores = [
        [0.2, 0.9, 0.8, 0.1],  # anti-aligned: -0.894
        [0.9, 0.2, 0.1, 0.6],  # aligned: ranks (4,2,1,3) vs (3.5,1.5,1.5,3.5) -> 0.894
        [0.5, 0.5, 0.5, 0.5],  # constant: undefined
    ]
    corrs = bundle_correlations(scores, rewards)
    assert corrs[0] == pytest.approx(-4 / math.sqrt(20)) and corrs[1] == pytest.approx(4 / math.sqrt(20))
    assert corrs[2] is None
    assert select_bundle(scores, rewards) == 1
    assert select_bundle(scores, rewards, min_corr=0.95) is None


def test_select_bundle_ties_go_to_lowest_index():
    assert select_bundle([[0, 1], [0.1, 0.7], [0, 1]], [0, 1]) == 0


def test_select_bundle_none_cases():
    assert select_bundle([[0.1, 0.9, 0.3]], [1.0, 1.0, 1.0]) is None  # all rewards equal
    assert select_bundle([[0.4, 0.4], [0.7, 0.7]], [0.0, 1.0]) is None  # no bundle varies
    assert select_bundle([[0.9, 0.1, 0.5]], [0.0, 1.0, 0.5]) is None  # best corr -1 < 0
    assert select_bundle([], [0.0, 1.0]) is None
    # a zero correlation is no evidence of alignment: not selected at the default threshold 0
    assert select_bundle([[1, 0, 0, 1]], [0, 0, 1, 1]) is None
    assert select_bundle([[1, 0, 0, 1]], [0, 0, 1, 1], min_corr=-0.5) == 0


def test_select_bundle_rejects_nan_and_bad_shapes():
    with pytest.raises(ValueError, match="finite"):
        select_bundle([[float("nan"), 1.0]], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"\[K\]\[G\]"):
        select_bundle([[0.1, 0.2, 0.3]], [0.0, 1.0])


def test_random_selection_ablation():
    rng = np.random.default_rng(0)
    scores = [[0.1, 0.9], [0.9, 0.1], [0.5, 0.5]]
    picks = {select_random_bundle(scores, [0.0, 1.0], rng) for _ in range(60)}
    assert picks == {0, 1, 2}  # ignores alignment, even constant bundles can be drawn
    assert select_random_bundle(scores, [1.0, 1.0], rng) is None


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 6).flatmap(
        lambda g: st.tuples(
            st.lists(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=g, max_size=g), min_size=1, max_size=4),
            st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=g, max_size=g),
        )
    )
)
def test_selection_is_nan_free_and_consistent(case):
    scores, rewards = case
    corrs = bundle_correlations(scores, rewards)
    assert all(c is None or (-1.0 <= c <= 1.0 and not math.isnan(c)) for c in corrs)
    chosen = select_bundle(scores, rewards)
    if chosen is not None:
        assert corrs[chosen] == max(c for c in corrs if c is not None) and corrs[chosen] >= 0
        assert len(set(rewards)) > 1


# --------------------------------------------------------------------------- shaping


def test_shape_advantages_hand_values():
    adv = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0])
    delta = torch.tensor([9.0, 0.5, -3.0, 2.0, 7.0])
    mask = torch.tensor([0, 1, 1, 1, 0])
    out = shape_advantages(adv, delta, mask, beta=0.1, clip=1.0)
    torch.testing.assert_close(out, torch.tensor([0.0, 1.05, 0.9, 1.1, 0.0]))


def test_centring_and_shaping_take_no_gradient():
    adv = torch.zeros(4)
    delta = torch.tensor([0.0, 0.3, 0.1, 0.2], requires_grad=True)
    mask = torch.tensor([0, 1, 1, 1])
    centred = centre_delta(delta, mask)
    torch.testing.assert_close(centred, torch.tensor([0.0, 0.1, -0.1, 0.0]))
    out = shape_advantages(adv, centred, mask, beta=1.0, clip=5.0)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.1, -0.1, 0.0]))
    assert not centred.requires_grad and not out.requires_grad
    # all-masked and zero-delta inputs are NaN-free identities
    assert torch.equal(centre_delta(delta.detach(), torch.zeros(4)), torch.zeros(4))
    assert torch.equal(shape_advantages(adv + 0.5, centre_delta(torch.zeros(4), mask), mask, 1.0, 1.0), adv + 0.5)


def test_a_centred_bounded_correction_sits_at_its_documented_scale(policy, monkeypatch, tmp_path):
    """A rubric that shifts every token's log-likelihood by -0.3 (plus a little): centred, the
    normalised correction's mean size over the group's tokens is beta times the group's mean
    |advantage|, as documented; measuring the scale before centring left it ~30x below."""
    from algos_helpers import make_group

    from orsd_gym.algos.base import make_algorithm
    from orsd_gym.algos.orsd import algorithm as orsd_module

    def shifted(policy, trajectories, rubrics, **settings):
        wiggle = [0.01 * torch.cos(torch.arange(len(t.token_ids), dtype=torch.float32)) for t in trajectories]
        return [(w - 0.3) * torch.tensor(t.loss_mask, dtype=torch.float32) for w, t in zip(wiggle, trajectories)]

    monkeypatch.setattr(orsd_module, "replay_deltas", shifted)
    path = tmp_path / "rubric.yaml"
    path.write_text("'*': [[Reads the task first]]\n")
    group = make_group(policy, successes=[True, False, False, True], group_id=0, task_id=0, seed=3)
    beta = 0.05
    settings = {"rubric_source": "file", "rubric_file": str(path), "min_corr": -1.0, "beta": beta}
    orsd = make_algorithm("orsd", {**settings, "center_delta": True, "delta_scale": "bounded"}, verifier=policy)
    batch = orsd.prepare(group, policy, iteration=0, rng=np.random.default_rng(0))
    assert batch.audit[0]["selected"] == 0
    sampled = [torch.tensor(t.loss_mask, dtype=torch.bool) for t in group]
    corrections = torch.cat([c[m] for c, m in zip(batch.token_extras["orsd_correction"], sampled)])
    typical_advantage = np.mean([float(a.abs().max()) for a in batch.outcome_advantages])
    assert float(corrections.abs().mean()) == pytest.approx(beta * typical_advantage, rel=1e-4)
    assert batch.metrics["orsd/correction_capped_frac"] == 0.0  # the cap never binds at this beta


def test_the_capped_share_counts_only_tokens_the_outcome_gives_a_signal():
    """A token with A = 0 has cap 0 and correction 0 by construction: the bound did not bind there."""
    from orsd_gym.algos.base import PreparedBatch
    from orsd_gym.algos.orsd import ORSDConfig
    from orsd_gym.algos.orsd.records import capped_frac

    outcome = [torch.tensor([1.0, 1.0, 0.0, 0.0])]
    delta = [torch.tensor([2.0, 0.01, 2.0, 0.5])]
    correction = shape_advantages(outcome[0], delta[0], torch.ones(4), beta=1.0, clip=1.0, bound=0.5) - outcome[0]
    batch = PreparedBatch([None], [0.0], [outcome[0] + correction], [torch.zeros(4)], outcome_advantages=outcome)
    assert capped_frac(batch, delta, [correction], ORSDConfig(correction_bound=0.5)) == 0.5  # 1 of 2, not 3 of 4


def test_bounded_correction_hand_values():
    adv = torch.tensor([0.0, 1.0, 1.0, -0.5, 0.0, 2.0])
    delta = torch.tensor([9.0, 0.5, -3.0, 2.0, 7.0, -0.2])
    mask = torch.tensor([0, 1, 1, 1, 1, 1])
    out = shape_advantages(adv, delta, mask, beta=1.0, clip=1.0, bound=0.4)
    # corrections 0.5, -1, 1, 1, -0.2 capped at 0.4|A| = 0.4, 0.4, 0.2, 0, 0.8
    torch.testing.assert_close(out, torch.tensor([0.0, 1.4, 0.6, -0.3, 0.0, 1.8]))
    with pytest.raises(ValueError, match="fraction"):
        shape_advantages(adv, delta, mask, beta=1.0, clip=1.0, bound=1.0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            # No subnormal advantages: (1 - c) times the smallest one rounds to 0, a limit of float64.
            st.floats(-5, 5, allow_nan=False, allow_subnormal=False),
            st.floats(-50, 50, allow_nan=False),
            st.booleans(),
        ),
        min_size=1,
        max_size=20,
    ),
    st.floats(0, 100, allow_nan=False),
    st.floats(0, 0.999),
    st.booleans(),
)
def test_bounded_correction_never_flips_or_outweighs_an_outcome_advantage(tokens, beta, bound, center):
    adv = torch.tensor([a for a, _, _ in tokens], dtype=torch.float64)
    delta = torch.tensor([d for _, d, _ in tokens], dtype=torch.float64)
    mask = torch.tensor([int(m) for _, _, m in tokens])
    if center:
        delta = centre_delta(delta, mask)
    out = shape_advantages(adv, delta, mask, beta=beta, clip=10.0, scale=3.0, bound=bound)
    nonzero = adv != 0
    assert torch.all(torch.sign(out[nonzero]) == torch.sign(adv[nonzero]))
    assert torch.all((out - adv).abs() <= bound * adv.abs() + 1e-9)
    assert torch.all(out[~nonzero] == 0)


def test_shape_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match="one shape"):
        shape_advantages(torch.zeros(3), torch.zeros(2), torch.zeros(3), 0.1, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        shape_advantages(torch.zeros(2), torch.tensor([float("nan"), 0.0]), torch.ones(2), 0.1, 1.0)
    # NaN on a masked-out token is ignored: it is not a model token
    out = shape_advantages(torch.zeros(2), torch.tensor([float("nan"), 0.5]), torch.tensor([0, 1]), 0.1, 1.0)
    assert torch.isfinite(out).all()


# --------------------------------------------------------------------------- rubric parsing

MESSY = """Sure! Here are some criteria for this task:

1. **Checks the price** before buying.
2) Opens the drawer before taking the key
 3 : Uses the search box with the product name
- Avoids repeating the same action
* Avoids repeating the same action
• ok
Criterion 5: Confirms the item options match the instruction
I hope this helps!"""


def test_parse_criteria_on_messy_output():
    assert parse_criteria(MESSY, max_criteria=10) == [
        "Checks the price before buying.",
        "Opens the drawer before taking the key",
        "Uses the search box with the product name",
        "Avoids repeating the same action",
        "Confirms the item options match the instruction",
    ]


def test_parse_criteria_limits_inline_lists_and_malformed():
    assert parse_criteria(MESSY, max_criteria=2) == [
        "Checks the price before buying.",
        "Opens the drawer before taking the key",
    ]
    inline = "1. Goes to the fridge first 2. Takes the apple from the fridge 3. Heats it in the microwave"
    assert parse_criteria(inline, 5) == [
        "Goes to the fridge first",
        "Takes the apple from the fridge",
        "Heats it in the microwave",
    ]
    # No list item at all: read line by line, unless plain lines are turned off (the old parser).
    assert parse_criteria("The agent should look around carefully and think.", 4) == [
        "The agent should look around carefully and think."
    ]
    assert parse_criteria("The agent should look around carefully and think.", 4, plain_lines=False) == []
    assert parse_criteria("", 4) == []
    assert parse_criteria("1.\n2. ok\n-", 4) == []
    with pytest.raises(ValueError):
        parse_criteria(MESSY, 0)


def _traj(actions, observations, success=True):
    return Trajectory(
        token_ids=[0],
        loss_mask=[0],
        logprobs=[0.0],
        spans=[TurnSpan("prompt", 0, 1)],
        rewards=[1.0],
        infos=[{}],
        model_turns=list(actions),
        actions=list(actions),
        observations=list(observations),
        task="find it",
        prompt_messages=[{"role": "user", "content": "hi"}],
        env_id="e",
        task_id=0,
        seed=0,
        group_id=0,
        episode_id=0,
        success=success,
    )


def test_proposal_prompt_shows_attempts_never_outcomes():
    winner = _traj(["guess 10"], ["start", "Correct!"], success=True)
    loser = _traj(["guess 3", "guess 4"], ["start", "too low " * 60, "too low"], success=False)
    messages = proposal_messages("find it", [winner, loser], max_criteria=3)
    user = messages[-1]["content"]
    assert "Attempt A:" in user and "Attempt B:" in user and "> guess 4" in user
    assert "reward" not in user.lower() and "success" not in user.lower()
    assert "..." in render_attempt(loser, max_obs_chars=40)
    with pytest.raises(ValueError, match="placeholder"):
        proposal_messages("t", [winner], max_criteria=3, template="{task} {score}")


def test_insert_rubric_system_and_user():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    out = insert_rubric(msgs, "- a", placement="system", template="R:\n{rubric}")
    assert out == [{"role": "system", "content": "S\n\nR:\n- a"}, {"role": "user", "content": "U"}]
    assert msgs[0]["content"] == "S"  # not mutated
    assert insert_rubric(msgs, "- a", placement="user", template="{rubric}")[1]["content"] == "U\n\n- a"
    assert insert_rubric(msgs[1:], "- a", placement="system", template="{rubric}")[0] == {
        "role": "system",
        "content": "- a",
    }
    assert insert_rubric(msgs, "  ", placement="user") == msgs


def test_render_attempt_keeps_head_and_tail_of_long_episodes():
    actions = [f"go to place {i}" for i in range(1, 11)]
    traj = _traj(actions, ["start"] + [f"You arrive at place {i}." for i in range(1, 11)])
    text = render_attempt(traj, max_steps=4)
    assert "1. > go to place 1" in text and "2. > go to place 2" in text
    assert "9. > go to place 9" in text and "10. > go to place 10" in text
    assert "(6 steps omitted)" in text and "place 5" not in text
    assert render_attempt(traj, max_steps=10).count("> go to") == 10


def test_parse_criteria_drops_headings_and_stray_numbers():
    text = "Criteria:\n- 1: Touches the apple before the fridge\n- Scaling:\n- 2) Opens the fridge door\n* Rebinding:"
    assert parse_criteria(text, 4) == ["Touches the apple before the fridge", "Opens the fridge door"]


def test_a_proposal_cut_by_the_token_limit_loses_its_unfinished_line():
    from orsd_gym.algos.orsd.proposer import complete_lines
    from orsd_gym.policies.base import Completion

    text = "1. Opens the fridge first\n2. Takes the apple before going to the"
    assert parse_criteria(complete_lines(Completion([], [], text, "length")), 4) == ["Opens the fridge first"]
    assert len(parse_criteria(complete_lines(Completion([], [], text, "eos")), 4)) == 2


SMALL_MODEL_ANSWER = """Sure! Here are the criteria for the task:
Criterion: The agent takes the apple 1 from countertop 1.
**Criterion 2** - Goes to the fridge 1 after taking the apple
The agent puts the apple in the fridge.
The agent puts the apple in the fridge.
Okay.
done = False
getResponses
nyder Conservation regime MR happy
I hope this helps!"""


def test_parse_criteria_reads_plain_lines_and_labels_when_there_is_no_list():
    assert parse_criteria(SMALL_MODEL_ANSWER, 5) == [
        "The agent takes the apple 1 from countertop 1.",
        "Goes to the fridge 1 after taking the apple",
        "The agent puts the apple in the fridge.",
    ]
    assert parse_criteria(SMALL_MODEL_ANSWER, 5, plain_lines=False) == []
    # Any list item present: only list items count, surrounding sentences are prose.
    assert parse_criteria("The agent must be fast.\n1. Opens the fridge first", 4) == ["Opens the fridge first"]


def test_proposal_prompt_has_the_envs_worked_example_of_another_task_type():
    def attempt(task_type):
        trajectory = _traj(["go to sofa 1"], ["start", "You arrive at sofa 1."])
        trajectory.infos = [{"task_type": task_type}]
        return trajectory

    alfworld = "orsd_gym/ALFWorld-v0"
    pillow = "put some pillow on armchair"
    example = example_for(alfworld, pillow, {"task_type": "pick_and_place_simple"})
    messages = proposal_messages(pillow, [attempt("pick_and_place_simple")] * 2, max_criteria=2, example=example)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"].startswith("Task: heat some muffin") and "Attempt B:" in messages[1]["content"]
    assert messages[2]["content"] == (
        "1. Takes the muffin 1 from countertop 1 before going anywhere else\n2. Heats the muffin 1 with microwave 1"
    )
    # A small model often copies the example: criteria naming the example's object are dropped.
    copies = [e.thing for e in examples_for(alfworld)]
    assert parse_criteria(messages[2]["content"], 2, copies=copies) == []
    assert parse_criteria("1. Heats the Muffin 1 first\n2. Takes the pillow 1 from sofa 1", 4, copies=copies) == [
        "Takes the pillow 1 from sofa 1"
    ]
    assert messages[3]["content"].startswith("Task: put some pillow on armchair")
    heating = example_for(alfworld, "heat some cup", {"task_type": "pick_heat_then_place_in_recep"})
    assert proposal_messages("heat some cup", [attempt("x")], max_criteria=4, example=heating)[1]["content"].startswith(
        "Task: put some scarf on bed"
    )
    # Offline there are no attempts: the task's wording says it is a heating task.
    hot = "put a hot cup in cabinet"
    offline = proposal_messages(
        hot, None, max_criteria=4, template=DEFAULT_OFFLINE_PROPOSAL_TEMPLATE, example=example_for(alfworld, hot, {})
    )
    assert offline[1]["content"].startswith("Task: put some scarf")
    assert example_for(alfworld, "guess the number", {}) is ALFWORLD_EXAMPLES[0]


def test_an_env_with_no_worked_examples_gets_none_from_another_env():
    for env_id in ("orsd_gym/WebShop-v0", "orsd_gym/GuessNumber-v0", "not/registered-v0", None):
        assert example_for(env_id, "buy a scarf", {}) is None and examples_for(env_id) == ()
    messages = proposal_messages("buy a scarf", [_traj(["search[scarf]"], ["start", "results"])], max_criteria=3)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert parse_criteria("1. Searches for a wool scarf first", 3) == ["Searches for a wool scarf first"]
