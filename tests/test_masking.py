"""Masking by construction: real chat templates (SmolLM2's ChatML, Qwen3's with thinking tags)."""

from __future__ import annotations

import copy

import pytest

from orsd_gym.errors import ChatTemplateError

pytest.importorskip("torch")

from orsd_gym.policies.base import Completion, SamplingParams  # noqa: E402
from orsd_gym.policies.chat import ChatRenderer  # noqa: E402
from orsd_gym.rollout.actions import choose_action, extract_last_line, extract_tag, get_parser  # noqa: E402
from orsd_gym.rollout.episode import PerStepEpisode, SequenceEpisode  # noqa: E402

# Qwen3's chat template (tool branches omitted: rollouts send no tools), written from its published format.
QWEN3_TEMPLATE = """{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}
{%- if ns.multi_step_tool and message.role == "user" and message.content is string %}{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}
{%- endfor %}
{%- for message in messages %}
{%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}{%- endif %}
{%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
{%- elif message.role == "assistant" %}
{%- set reasoning_content = '' %}
{%- if '</think>' in content %}
{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
{%- set content = content.split('</think>')[-1].lstrip('\\n') %}
{%- endif %}
{%- if loop.index0 > ns.last_query_index %}
{%- if loop.last or (not loop.last and reasoning_content) %}
{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}
{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}{%- endif %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}"""


@pytest.fixture(scope="module")
def qwen3_tokenizer(policy):
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = QWEN3_TEMPLATE
    tokenizer.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    return tokenizer


def _scripted(fmt: ChatRenderer, text: str, *, eos: bool) -> Completion:
    ids = fmt.encode(text)
    if eos:
        ids.append(fmt.tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return Completion(ids, [-0.5] * len(ids), text, "eos" if eos else "stop")


def _play(fmt: ChatRenderer, turns: list[Completion], observations: list[str]) -> SequenceEpisode:
    episode = SequenceEpisode(fmt, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Start."}])
    previous = list(episode.context())
    for completion, obs in zip(turns, observations):
        episode.add_model_turn(completion)
        episode.add_observation(obs)
        now = episode.context()
        assert now[: len(previous)] == previous, "the token prefix changed between turns"
        previous = list(now)
    return episode


def _check_invariants(fmt: ChatRenderer, episode: SequenceEpisode, turns: list[Completion], observations: list[str]):
    sample = episode.sample
    assert len(sample.token_ids) == len(sample.loss_mask) == len(sample.logprobs)
    assert sample.spans[0].start == 0 and sample.spans[-1].end == len(sample.token_ids)
    assert all(a.end == b.start for a, b in zip(sample.spans, sample.spans[1:]))
    model = [s for s in sample.spans if s.kind == "model"]
    env = [s for s in sample.spans if s.kind == "env"]
    assert len(model) == len(turns) and len(env) == len(observations)
    for span, completion in zip(model, turns):
        assert sample.token_ids[span.start : span.end] == completion.token_ids  # never re-tokenised
        assert fmt.tokenizer.decode(sample.token_ids[span.start : span.end]) == fmt.tokenizer.decode(
            completion.token_ids
        )
        assert set(sample.loss_mask[span.start : span.end]) == {1}
        assert sample.logprobs[span.start : span.end] == completion.logprobs
    for span, obs in zip(env, observations):
        assert set(sample.loss_mask[span.start : span.end]) == {0}
        assert obs in fmt.tokenizer.decode(sample.token_ids[span.start : span.end])
    # Nothing but model spans is ever trained on.
    trained = {i for s in model for i in range(s.start, s.end)}
    assert {i for i, m in enumerate(sample.loss_mask) if m} == trained


def test_smollm2_chatml_bridges(policy):
    fmt = policy.chat
    turns = [
        _scripted(fmt, "<action>open door</action>", eos=False),
        _scripted(fmt, "I go. <action>north</action>", eos=True),
    ]
    observations = ["The door is locked.", "You are in a hall, see 2 doors."]
    episode = _play(fmt, turns, observations)
    _check_invariants(fmt, episode, turns, observations)
    text = policy.tokenizer.decode(episode.context())
    # A turn cut by a stop string gets <|im_end|> from the bridge; one that sampled it does not get a second.
    assert "</action><|im_end|>\n<|im_start|>user\nThe door is locked.<|im_end|>\n<|im_start|>assistant\n" in text
    assert "north</action><|im_end|>\n<|im_start|>user\nYou are in" in text
    assert "<|im_end|><|im_end|>" not in text
    # The rendered episode equals the chat template applied to the same conversation.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Start."}]
    for turn, obs in zip(turns, observations):
        messages += [{"role": "assistant", "content": turn.text}, {"role": "user", "content": obs}]
    assert text == fmt.render_text(messages)


@pytest.mark.parametrize("thinking", [True, False])
def test_qwen3_template_with_thinking_tags(qwen3_tokenizer, thinking):
    fmt = ChatRenderer(qwen3_tokenizer, {"enable_thinking": thinking})
    turns = [
        _scripted(fmt, "<think>\nThe key opens it.\n</think>\n\n<action>use key</action>", eos=True),
        _scripted(fmt, "<think>\nGo on.\n</think>\n\n<action>go east</action>", eos=False),
    ]
    observations = ["Click. The door opens.", "A garden. é × ™"]
    episode = _play(fmt, turns, observations)
    _check_invariants(fmt, episode, turns, observations)
    text = qwen3_tokenizer.decode(episode.context())
    # Thinking stays in the sequence exactly as sampled (the template would strip it on re-render).
    assert "<think>\nThe key opens it.\n</think>" in text
    header = "<|im_start|>assistant\n" + ("" if thinking else "<think>\n\n</think>\n\n")
    assert text.endswith("A garden. é × ™<|im_end|>\n" + header)
    assert text.count("<|im_end|>") == 2 + 2 * len(turns)  # system, user, then (assistant, user) per turn


def test_real_sampled_turns_keep_masks(policy):
    fmt = policy.chat
    episode = SequenceEpisode(fmt, [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go."}])
    turns, observations = [], ["You see a key.", "Nothing happens."]
    for step, obs in enumerate(observations):
        out = policy.generate([episode.context()], SamplingParams(max_new_tokens=8, seed=step))[0]
        episode.add_model_turn(out)
        episode.add_observation(obs)
        turns.append(out)
    _check_invariants(fmt, episode, turns, observations)
    scores = policy.score([episode.context()], [episode.sample.loss_mask])[0]
    mask = episode.sample.loss_mask
    for i, (m, lp) in enumerate(zip(mask, episode.sample.logprobs)):
        if m:
            assert abs(float(scores[i]) - lp) < 1e-4
        else:
            assert float(scores[i]) == 0.0


def test_per_step_layout(policy):
    fmt = policy.chat
    render = lambda recent, obs, info: f"history={recent} now={obs}"  # noqa: E731
    episode = PerStepEpisode(fmt, "Play.", "first", render, history=1, first_observation="o0")
    for k in range(3):
        out = _scripted(fmt, f"<action>a{k}</action>", eos=True)
        episode.add_model_turn(out)
        episode.add_observation("", action=f"a{k}", observation=f"o{k + 1}", info={})
    samples = episode.samples()
    assert len(samples) == 3
    assert samples[2].prompt_messages[1]["content"] == "history=[('o1', 'a1')] now=o2"
    for sample in samples:
        assert [s.kind for s in sample.spans] == ["prompt", "model"]
        assert sum(sample.loss_mask) == sample.spans[1].end - sample.spans[1].start


def test_action_parsers():
    assert extract_tag("think <action> go north </action> more <action>look</action>") == "look"
    assert extract_tag("no tags here") is None and extract_tag("<action>  </action>") is None
    assert extract_last_line("I think.\n\n  take key  \n\n") == "take key"
    assert extract_last_line("   \n") is None
    tag = get_parser("tag")
    assert choose_action("<action>x</action>", tag, "as_is", "look").format_valid
    invalid = choose_action("  rambling  ", tag, "as_is", "look")
    assert (invalid.action, invalid.format_valid) == ("rambling", False)
    assert choose_action("rambling", tag, "noop", "look").action == "look"
    with pytest.raises(ValueError, match="action_format"):
        get_parser("json")


def test_template_without_content_passthrough(policy):
    tokenizer = copy.deepcopy(policy.tokenizer)
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="verbatim"):
        ChatRenderer(tokenizer).bridge_text("obs")
