"""Regression tests of the comparison's trust fixes: what ORSD's rubric writer and verifier may
read, per-episode statistics, and the smaller ORSD/GRPO correctness fixes."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from algos_helpers import make_group
from test_masking import QWEN3_TEMPLATE

import orsd_gym  # noqa: F401
from orsd_gym.algos.base import make_algorithm
from orsd_gym.algos.grpo import GRPO
from orsd_gym.algos.orsd.replay import replay_deltas
from orsd_gym.algos.orsd.rubrics import proposal_messages, render_attempt
from orsd_gym.algos.orsd.verifier import Judgement, Verifier, answer_token_ids
from orsd_gym.envs.base import REVEALS_OUTCOME
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.hf import HFPolicy
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.rollout.collector import EnvSetup, TaskSpec, Teacher, collect
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.rollout.stats import rollout_stats
from orsd_gym.train.config import load_config
from orsd_gym.train.trainer import Trainer

GUESS = "orsd_gym/GuessNumber-v0"


def _guess_teacher(info):
    """Guesses right at once on task 4 (number 5); elsewhere the lowest number still possible."""
    return f"guess {info['task_id'] + 1}" if info["task_id"] == 4 else info["admissible_actions"][0]


def _two_episodes(policy, layout):
    """One episode won in 1 step (task 4) and one lost after 3 steps (task 19, number 20)."""
    return collect(
        EnvSetup(GUESS, num_envs=1),
        Teacher(policy, _guess_teacher),
        [TaskSpec(0, 4), TaskSpec(0, 19)],
        group_size=1,
        options=RolloutOptions(max_turns=3, layout=layout, action_format="last_line"),
    )


# --------------------------------------------------------------------------- 2. no outcome for the judges


def test_rubric_writer_and_verifier_never_read_the_final_observation(policy):
    won, lost = _two_episodes(policy, "sequence")
    assert won.success and won.observations[-1] == "Correct, the number is 5!"
    user = proposal_messages(won.task, [won, lost], max_criteria=3)[-1]["content"]
    assert "Correct" not in user and "guess 5" in user
    # Not for budget-cut episodes either: hiding only terminal pages would itself tell the outcome.
    assert lost.truncated and lost.observations[-1] not in render_attempt(lost)
    assert lost.observations[1] in render_attempt(lost)
    verifier = Verifier(policy.copy_frozen())
    context = policy.tokenizer.decode(verifier.context(Judgement(won.task, render_attempt(won), "guesses well")))
    assert "Correct" not in context


def test_webshop_score_page_never_reaches_the_judges(policy):
    pytest.importorskip("spacy")
    env = gym.make("orsd_gym/WebShop-v0", goal_split="train")  # the embedded catalog is enough here

    def shopper(info):
        actions = info["admissible_actions"]
        if actions == ["search[<your query>]"]:
            return "search[shirt]"
        products = [a for a in actions if a.startswith("click[") and a[6:-1].isalnum() and len(a) == 17]
        return "click[buy now]" if "click[buy now]" in actions else products[0]

    (attempt,) = collect(
        EnvSetup(env, num_envs=1),
        Teacher(policy, shopper),
        [TaskSpec(0, 0)],
        group_size=1,
        options=RolloutOptions(max_turns=5),
    )
    env.close()
    assert attempt.terminated and "Your score" in attempt.observations[-1]
    assert "score" not in render_attempt(attempt, max_obs_chars=10_000).lower()


def test_an_env_can_hide_outcome_text_in_the_middle_of_an_episode(policy):
    lost = _two_episodes(policy, "sequence")[1]
    lost.infos[1] = {**lost.infos[1], REVEALS_OUTCOME: True}
    text = render_attempt(lost)
    assert lost.observations[1] not in text and "observation hidden" in text and lost.observations[2] in text


# --------------------------------------------------------------------------- 3. per-episode statistics


@pytest.mark.parametrize("layout", ["sequence", "per_step"])
def test_statistics_count_episodes_not_samples(policy, layout):
    samples = _two_episodes(policy, layout)
    assert len(samples) == (2 if layout == "sequence" else 4)
    assert len({t.episode_id for t in samples}) == 2
    assert [t.step for t in samples] == ([None, None] if layout == "sequence" else [0, 0, 1, 2])
    stats = rollout_stats(samples)
    assert stats["success_rate"] == 0.5 and stats["env_steps"] == 4 and stats["episode_len"] == 2
    assert make_algorithm("grpo").grpo_prepare(samples, policy).metrics["reward_mean"] == 0.5


# --------------------------------------------------------------------------- 4, 7, 8, 9, 10


def test_offline_rubrics_are_proposed_again_when_none_parsed(policy):
    group = make_group(policy, successes=[True, False], group_id=0, task_id=0, seed=3)
    orsd = make_algorithm("orsd", {"rubric_mode": "offline", "num_bundles": 2, "proposal_max_new_tokens": 4})
    calls = []
    generate = policy.generate

    def counting(contexts, params, **kwargs):
        calls.append(len(contexts))
        return generate(contexts, params, **kwargs)

    policy.generate = counting
    try:
        for _ in range(2):  # tiny-random writes nothing that parses
            orsd.prepare(group, policy, iteration=0, rng=np.random.default_rng(0))
    finally:
        del policy.generate
    assert orsd.offline_bundles == {} and calls == [2, 2]


def test_verifier_answers_are_symmetric(policy):
    yes, no = answer_token_ids(policy.tokenizer)
    assert len(yes) == len(no) >= 2
    encode = lambda text: policy.tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    assert len(encode("YES")) > 1 and encode("NO")[0] not in no  # SmolLM2: "YES" is 2 tokens, so "NO" goes too


def test_update_runs_in_train_mode_so_lora_dropout_acts(tmp_path, monkeypatch):
    modes = []
    loss = GRPO.loss

    def recording(self, policy, *args, **kwargs):
        modes.append(policy.model.training)
        return loss(self, policy, *args, **kwargs)

    monkeypatch.setattr(GRPO, "loss", recording)
    config = load_config(
        None,
        [
            "model.name=tiny-random",
            f"env.id={GUESS}",
            "model.lora={enabled: true, r: 4, alpha: 8, dropout: 0.5}",
            # tiny-random never wins, so its groups carry no advantage: a KL term makes the update run.
            "algo.per_algo.grpo.kl_coef=0.01",
            "rollout.tasks_per_iteration=1",
            "rollout.group_size=2",
            "rollout.max_turns=1",
            "rollout.max_new_tokens=4",
            "eval.every=0",
            "eval.num_tasks=1",
            "train.iterations=1",
            "train.threads=1",
            f"train.output_dir={tmp_path}",
            "logging.live=false",
            "logging.tensorboard=false",
        ],
    )
    trainer = Trainer(config)
    trainer.run()
    assert modes and all(modes) and not trainer.policy.model.training


def test_bf16_deltas_compare_passes_computed_alike():
    """In bfloat16, cached decoding and one full forward can differ by more than a typical delta
    (by over 1e-3 on some CPUs, a few 1e-6 on others, so that gap is not asserted); both sides of
    delta are full passes in the update dtype, so an unchanged prompt gives exactly 0 anywhere."""
    bf16 = load_policy("tiny-random", dtype="bfloat16")
    samples = collect(
        GUESS,
        bf16,
        [TaskSpec(1, 3)],
        group_size=2,
        sampling=SamplingParams(max_new_tokens=6),
        options=RolloutOptions(max_turns=2, action_format="last_line"),
    )
    empty = [""] * len(samples)  # the privileged prompt is the original one: delta must be 0
    for baseline in ("rollout", "rescore"):
        deltas = replay_deltas(bf16, samples, empty, baseline=baseline, force_score=True)
        assert max(float(d.abs().max()) for d in deltas) == 0.0


def test_judges_render_with_thinking_off(policy):
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = QWEN3_TEMPLATE
    qwen = HFPolicy(policy.model, tokenizer, PolicySettings(chat_template_kwargs={"enable_thinking": True}))
    context = tokenizer.decode(Verifier(qwen).context(Judgement("t", "a", "c")))
    assert context.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    rollout_prompt = tokenizer.decode(qwen.chat.prompt_tokens([{"role": "user", "content": "x"}]))
    assert rollout_prompt.endswith("<|im_start|>assistant\n")  # rollouts keep the policy's own setting


def test_a_lora_policy_samples_without_dropout_from_the_start():
    """peft leaves its adapters in train mode: a fresh LoRA policy must be in eval mode, or its
    dropout would act on the first rollout (the update switches it off afterwards)."""
    from orsd_gym.policies.models import load_policy

    policy = load_policy("tiny-random", lora={"r": 4, "alpha": 8, "dropout": 0.5})
    assert not any(module.training for module in policy.model.modules())
