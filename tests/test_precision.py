"""Numbers that mean the same in every precision mode: what a loss compares its forward with
(PPO's old log-probs, the KL reference's) is scored in the update dtype with the update's own
micro-batches, and ORSD's delta in float32, whatever dtype sampling and updates compute in;
16-bit weights are never fully fine-tuned; update metrics count tokens."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from resumable_env import ENV_ID

from orsd_gym.algos.base import make_algorithm
from orsd_gym.algos.orsd.replay import replay_deltas
from orsd_gym.errors import ConfigError
from orsd_gym.policies.base import SamplingParams
from orsd_gym.policies.hf import HFPolicy
from orsd_gym.policies.models import load_policy
from orsd_gym.policies.settings import PolicySettings
from orsd_gym.rollout.collector import EnvSetup, TaskSpec, collect
from orsd_gym.rollout.options import RolloutOptions
from orsd_gym.rollout.trajectory import load_jsonl
from orsd_gym.train.config import OptimConfig, load_config
from orsd_gym.train.metrics import read_metrics
from orsd_gym.train.trainer import Trainer
from orsd_gym.train.update import RUNTIME_ALLOWANCE_GB, UpdateStep, make_optimizer, memory_left, update_policy

VOWEL_RUN = [
    "model.name=tiny-random",
    f"env.id={ENV_ID}",
    "rollout.tasks_per_iteration=2",
    "rollout.group_size=3",
    "rollout.max_turns=1",
    "rollout.max_new_tokens=8",
    "rollout.action_format=last_line",
    "algo.per_algo.grpo={reward: {outcome: return}}",
    "eval.every=0",
    "eval.num_tasks=2",
    "train.iterations=1",
    "train.threads=1",
    "logging.live=false",
    "logging.tensorboard=false",
]
#: Sampled tokens whose probability was at most this are the decisions (the rest are near-certain).
DECISION_P = 0.9
RUBRIC = "- Starts by guessing the middle of the range\n- Halves the range after every answer"


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M sampling in bfloat16 over float32 weights: a real, peaked distribution, whose
    bf16 rounding shows where tiny-random's near-uniform one hides it."""
    return load_policy("smollm2-135m", inference_dtype="bfloat16")


@pytest.fixture(scope="module")
def guesses(smollm2):
    """Two GuessNumber groups of 3, sampled in bfloat16: rows of different lengths."""
    return collect(
        gym.make("orsd_gym/GuessNumber-v0", high=20),
        smollm2,
        [TaskSpec(0, 3), TaskSpec(1, 4)],
        group_size=3,
        sampling=SamplingParams(max_new_tokens=12, temperature=1.0, seed=5),
        options=RolloutOptions(max_turns=2, action_format="last_line"),
    )


def test_bf16_sampling_starts_the_ratio_and_the_kl_at_exactly_their_start(tmp_path):
    """One epoch, one mini-batch: the update's first (and only) step must see ratio 1 and KL 0,
    although the rollout sampled in bfloat16 (its log-probs differ from float32's)."""
    config = load_config(
        None,
        [
            *VOWEL_RUN,
            "model.inference_dtype=bfloat16",
            "algo.per_algo.grpo.kl_coef=0.1",
            f"train.output_dir={tmp_path}",
        ],
    )
    trainer = Trainer(config)
    assert trainer.algorithm.reference.model.dtype == torch.float32
    trainer.run()
    [record] = read_metrics(tmp_path / "metrics.jsonl")
    assert record["algo/sampler_logprob_gap"] > 1e-3  # bf16 sampling differs from the update's float32
    assert record["policy/clip_frac"] == 0.0
    assert record["policy/approx_kl_old"] == 0.0
    assert record["policy/kl_ref"] == 0.0


def test_bf16_updates_under_a_memory_budget_start_at_exactly_ratio_1_and_kl_0(tmp_path, smollm2):
    """The presets' update precision (bf16 over float32 weights) with a memory budget that gives
    each row a micro-batch of its own, where one scoring pass of the batch pads the shorter rows
    to the longest. In bf16 a row's log-probs depend on that padding (SmolLM2: up to 0.17 nats on
    a token), so only old and reference log-probs scored with the update's own micro-batches
    start its first step at ratio 1 and KL 0."""
    update = HFPolicy(smollm2.model, smollm2.tokenizer, update_dtype="bfloat16")
    # Weights, their gradients, AdamW's two moments, the float32 KL reference and autocast's bf16
    # copies, then room for the activations of one row of up to ~256 tokens: two rows of over 130
    # never share one.
    held = 5 * update.weight_bytes() + update.update_weight_copy_bytes() + update.update_activation_bytes(1, 256)
    held += 10**6
    config = load_config(
        None,
        [
            *VOWEL_RUN,
            "model.name=smollm2-135m",
            "model.update_dtype=bfloat16",
            "model.gradient_checkpointing=false",
            "env.id=orsd_gym/GuessNumber-v0",
            "env.kwargs={high: 20}",
            "rollout.group_size=2",
            "rollout.max_turns=3",
            "rollout.max_new_tokens=16",
            "algo.per_algo.grpo.kl_coef=0.1",
            f"optim.max_memory_gb={RUNTIME_ALLOWANCE_GB + held / 1e9}",
            f"train.output_dir={tmp_path}",
        ],
    )
    trainer = Trainer(config)
    # Rollouts generate within the same budget: what it leaves beside the training state.
    assert trainer.policy.generation_budget == memory_left(trainer.policy, trainer.algorithm, config.optim) > 0
    trainer.run()
    lengths = {len(t.token_ids) for t in load_jsonl(tmp_path / "audit" / "iter_000001" / "trajectories.jsonl")}
    assert max(lengths) - min(lengths) >= 16  # one pass would pad the shortest past a 16-token block
    [record] = read_metrics(tmp_path / "metrics.jsonl")
    assert record["algo/sampler_logprob_gap"] > 1e-3  # float32 sampling, bf16 updates
    assert record["policy/approx_kl_old"] == 0.0
    assert record["policy/clip_frac"] == 0.0
    assert record["policy/kl_ref"] == 0.0


@pytest.mark.parametrize("checkpointing", [False, True])
def test_an_update_micro_batch_scored_without_gradients_repeats_its_forward_bit_for_bit(
    smollm2, guesses, checkpointing
):
    """What the update's old log-probs rest on: the same rows, padded alike, give the same bf16
    log-probs without gradients in eval mode as with gradients in train mode (gradient
    checkpointing recomputes the same forward); padded further by a longer row they do not."""
    policy = (
        load_policy("smollm2-135m", update_dtype="bfloat16", settings=PolicySettings(gradient_checkpointing=True))
        if checkpointing
        else HFPolicy(smollm2.model, smollm2.tokenizer, update_dtype="bfloat16")
    )
    # Three rows of different lengths (cut short), and a longer one to pad them further.
    cuts = (156, 146, 138)
    tokens = [t.token_ids[:n] for t, n in zip(guesses, cuts)]
    masks = [t.loss_mask[:n] for t, n in zip(guesses, cuts)]
    longer = guesses[3]
    assert all(sum(m) > 0 for m in masks) and len(longer.token_ids) >= max(cuts) + 8
    old = policy.score(tokens, masks, precision="update")
    policy.set_training(True)
    try:
        new = policy.score(tokens, masks, with_grad=True)
    finally:
        policy.set_training(False)
    assert all(torch.equal(o, n.detach()) for o, n in zip(old, new))
    padded = policy.score([longer.token_ids, *tokens], [longer.loss_mask, *masks], precision="update")[1:]
    assert not all(torch.equal(o, p) for o, p in zip(old, padded))


def _decision_deltas(policy: HFPolicy, samples, rubric: str, **replay) -> torch.Tensor:
    deltas = replay_deltas(policy, samples, [rubric] * len(samples), **replay)
    picked = []
    for trajectory, delta in zip(samples, deltas):
        sampled_p = torch.tensor(trajectory.logprobs).exp()
        decision = torch.tensor(trajectory.loss_mask, dtype=torch.bool) & (sampled_p <= DECISION_P)
        picked.append(delta[decision])
    return torch.cat(picked)


def test_a_bf16_sampled_orsd_delta_is_the_float32_delta_on_decision_tokens(smollm2, guesses):
    """Both sides of delta are float32 passes, so sampling in bfloat16 changes nothing."""
    fp32 = HFPolicy(smollm2.model, smollm2.tokenizer, name="smollm2-135m")
    exact = _decision_deltas(fp32, guesses, RUBRIC, baseline="rescore")
    assert exact.numel() >= 20 and float(exact.abs().mean()) > 1e-3
    from_bf16 = _decision_deltas(smollm2, guesses, RUBRIC)
    assert float((from_bf16 - exact).abs().max()) < 1e-4


def test_orsd_delta_under_bf16_updates_is_the_float32_delta(smollm2, guesses):
    """The Qwen3 presets' precision (sampling and updates in bfloat16 over float32 weights): delta
    never meets a gradient and is scored in the weights' float32, so it is the float32 run's delta
    exactly. Scored in the update's bfloat16 it was off by a third of its size (README, "Precision")."""
    float32_run = HFPolicy(smollm2.model, smollm2.tokenizer, inference_dtype="bfloat16")
    presets = HFPolicy(smollm2.model, smollm2.tokenizer, inference_dtype="bfloat16", update_dtype="bfloat16")
    deltas = [replay_deltas(p, guesses, [RUBRIC] * len(guesses)) for p in (float32_run, presets)]
    assert sum(int(d.count_nonzero()) for d in deltas[0]) >= 20
    assert all(torch.equal(a, b) for a, b in zip(*deltas))


def test_mixed_precision_adamw_changes_nearly_every_weight_where_bf16_weights_would_not():
    """The GPU presets' precision (float32 master weights, bfloat16 compute) on a tiny model: one
    AdamW step at the presets' lr 1e-6 moves nearly every weight; bf16 weights are refused."""
    config = load_config("alfworld_qwen3_1.7b", ["model.name=tiny-random", "model.device=cpu"])
    model = config.model
    assert (model.dtype, model.update_dtype, config.optim.lr) == ("float32", "bfloat16", 1e-6)
    policy = load_policy(
        "tiny-random", dtype=model.dtype, update_dtype=model.update_dtype, inference_dtype=model.inference_dtype
    )
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    optimizer, _ = make_optimizer(policy, config.optim, total_steps=1)
    sequence = policy.tokenizer.encode("Your task is to: put a clean mug in the coffeemachine.")
    (logprobs,) = policy.score([sequence], with_grad=True)
    assert logprobs.dtype == torch.float32 and logprobs.requires_grad
    (-logprobs.sum()).backward()
    optimizer.step()
    after = policy.state_dict()
    changed = sum(int((after[k] != before[k]).sum()) for k in before)
    total = sum(v.numel() for v in before.values())
    assert changed / total > 0.99

    bf16 = load_policy("tiny-random", dtype="bfloat16")
    with pytest.raises(ConfigError, match="round away.*model.update_dtype=bfloat16"):
        make_optimizer(bf16, OptimConfig(lr=1e-6), total_steps=1)
    with pytest.raises(ValueError, match="only computes in a narrower dtype"):
        load_policy("tiny-random", dtype="bfloat16", update_dtype="float32")


def test_update_metrics_are_per_token_whatever_the_micro_batches(policy):
    """Trajectories of different lengths: metrics averaged over tokens do not change when a
    smaller micro-batch budget splits the mini-batch differently."""
    samples = []
    for first_group, new_tokens in ((0, 4), (1, 12)):
        samples += collect(
            gym.make(ENV_ID),
            policy,
            [TaskSpec(first_group, first_group)],
            group_size=3,
            sampling=SamplingParams(max_new_tokens=new_tokens, seed=1),
            options=RolloutOptions(max_turns=1, action_format="last_line"),
            first_group=first_group,
        )
    assert len({sum(t.loss_mask) for t in samples}) > 1
    grpo = make_algorithm("grpo", {"reward": {"outcome": "return"}})
    results = []
    for budget in (1, 100_000):  # one trajectory per micro-batch, or all in one
        copy = policy.copy_frozen()
        for parameter in copy.model.parameters():
            parameter.requires_grad_(True)
        optim = OptimConfig(lr=1e-12, micro_batch_tokens=budget)
        optimizer, scheduler = make_optimizer(copy, optim, total_steps=1)
        batch = grpo.prepare(samples, copy, iteration=0, rng=None)
        results.append(update_policy(copy, grpo, batch, optimizer, scheduler, optim, UpdateStep(seed=0, iteration=0)))
    split, whole = results
    assert split["tokens"] == whole["tokens"] == sum(sum(t.loss_mask) for t in samples)
    for key in ("loss/pg", "policy/clip_frac", "policy/approx_kl_old"):
        assert split[key] == pytest.approx(whole[key], abs=1e-6)


def test_the_update_packs_rows_of_similar_length_into_a_micro_batch(policy, monkeypatch):
    """A micro-batch pads its rows to its longest: rows go to micro-batches longest first, not in
    the mini-batch's random order, so a short row never pads to a long one's length."""
    import orsd_gym.train.update as update

    samples = []
    for first_group, new_tokens in ((0, 2), (1, 16), (2, 6)):
        samples += collect(
            gym.make(ENV_ID),
            policy,
            [TaskSpec(first_group, first_group)],
            group_size=2,
            sampling=SamplingParams(max_new_tokens=new_tokens, seed=1),
            options=RolloutOptions(max_turns=1, action_format="last_line"),
            first_group=first_group,
        )
    lengths = [len(t.token_ids) for t in samples]
    assert len(set(lengths)) > 2
    orders = []
    real = update.micro_batches
    monkeypatch.setattr(
        update, "micro_batches", lambda order, *a, **k: orders.append(list(order)) or real(order, *a, **k)
    )
    grpo = make_algorithm("grpo", {"reward": {"outcome": "return"}})
    copy = policy.copy_frozen()
    for parameter in copy.model.parameters():
        parameter.requires_grad_(True)
    optim = OptimConfig(lr=1e-12, micro_batch_tokens=2 * max(lengths))
    optimizer, scheduler = make_optimizer(copy, optim, total_steps=1)
    batch = grpo.prepare(samples, copy, iteration=0, rng=None)
    update_policy(copy, grpo, batch, optimizer, scheduler, optim, UpdateStep(seed=0, iteration=0))
    [order] = orders
    assert sorted(order) == list(range(len(samples)))
    assert [lengths[i] for i in order] == sorted(lengths, reverse=True)


def test_bf16_samples_depend_on_the_batch_but_what_enters_the_loss_does_not(smollm2):
    """bf16 batched matmuls are not batch-invariant: the same episode played with 6 env slots or
    1 gets sampling log-probs that differ (measured: up to 0.23 nats on identical tokens, and 1
    of these 6 episodes took another token), so a data-parallel bf16 run is not token for token
    the one-process run. Where the tokens agree, the old log-probs the loss uses agree exactly."""
    runs = [
        collect(
            EnvSetup(gym.make("orsd_gym/GuessNumber-v0", high=20), num_envs=slots),
            smollm2,
            [TaskSpec(0, 3), TaskSpec(1, 4)],
            group_size=3,
            sampling=SamplingParams(max_new_tokens=10, temperature=1.0, seed=7),
            options=RolloutOptions(max_turns=3, action_format="last_line"),
        )
        for slots in (6, 1)
    ]
    pairs = [(a, b) for a, b in zip(*runs) if a.token_ids == b.token_ids]
    assert len(pairs) >= 3
    sampler_gap = max(abs(x - y) for a, b in pairs for x, y in zip(a.logprobs, b.logprobs))
    assert 1e-3 < sampler_gap < 0.5
    old_a = _scored_for_the_loss(smollm2, [a for a, _ in pairs])
    old_b = _scored_for_the_loss(smollm2, [b for _, b in reversed(pairs)])
    assert max(float((x - y).abs().max()) for x, y in zip(old_a, reversed(old_b))) < 1e-5


def _scored_for_the_loss(policy: HFPolicy, trajectories) -> list[torch.Tensor]:
    return policy.score([t.token_ids for t in trajectories], [t.loss_mask for t in trajectories], precision="update")


def test_a_bf16_sampling_run_is_repeated_exactly_on_one_machine(tmp_path):
    records = []
    for name in ("a", "b"):
        out = tmp_path / name
        config = load_config(None, [*VOWEL_RUN, "model.inference_dtype=bfloat16", f"train.output_dir={out}"])
        Trainer(config).run()
        records.append(
            [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(out / "metrics.jsonl")]
        )
    assert records[0] == records[1]
