"""Token-aware masking by construction: an episode becomes token ids + loss mask as it is played.

Single-sequence layout (`SequenceEpisode`), one growing token sequence per episode:

* prompt (system + first user turn) rendered with the chat template: mask 0;
* each model turn: exactly the sampled token ids (never re-tokenised): mask 1 with their
  sampling log-probs;
* each env reply: the template's *bridge* (end of the assistant turn unless the model already
  sampled it, user header, observation text, end of user turn, assistant header), tokenised on
  its own and appended: mask 0.

Because tokens are only ever appended, the prefix never changes between turns (which is also
what lets the policy's KV cache be reused). The bridge is read off the chat template itself by
rendering a dummy conversation with a placeholder assistant turn, so any template works
(ChatML, Qwen3 with thinking tags, ...).

Per-step layout (`PerStepEpisode`, as verl-agent does): every step is its own sample, a fresh
prompt (task + last H turns + current observation) followed by the sampled tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orsd_gym.policies.base import Completion
from orsd_gym.rollout.trajectory import TurnSpan

_PLACEHOLDER = "\u27e6orsd-assistant-turn\u27e7"


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be used for multi-turn episodes."""


class ChatFormat:
    """A tokenizer's chat template, seen as prompt rendering plus per-turn bridges."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat_template; set tokenizer.chat_template to a Jinja template")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})

    @classmethod
    def from_policy(cls, policy: Any) -> ChatFormat:
        return cls(policy.tokenizer, getattr(policy, "chat_template_kwargs", None))

    def render_text(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt,
            **self.template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_tokens(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return self.encode(self.render_text(messages, add_generation_prompt=True))

    def bridge_text(self, user_message: str) -> str:
        """Text between the end of an assistant turn's content and the next assistant turn's content."""
        dummy = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _PLACEHOLDER},
            {"role": "user", "content": user_message},
        ]
        text = self.render_text(dummy, add_generation_prompt=True)
        if text.count(_PLACEHOLDER) != 1:
            raise ChatTemplateError("the chat template does not render assistant content verbatim")
        return text.split(_PLACEHOLDER, 1)[1]

    def bridge_tokens(self, user_message: str, completion: Completion) -> list[int]:
        """The bridge after ``completion``, minus the end-of-turn token when the model sampled it."""
        bridge = self.bridge_text(user_message)
        if completion.finish_reason == "eos" and completion.token_ids:
            eos_text = self.tokenizer.decode(completion.token_ids[-1:], skip_special_tokens=False)
            if eos_text and bridge.startswith(eos_text):
                bridge = bridge[len(eos_text) :]
        return self.encode(bridge)


@dataclass
class Sample:
    """Token ids, loss mask, log-probs and spans of one training sample."""

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    spans: list[TurnSpan] = field(default_factory=list)
    prompt_messages: list[dict[str, str]] = field(default_factory=list)

    def append(self, kind: str, tokens: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        if not tokens:
            return
        start = len(self.token_ids)
        self.token_ids.extend(int(t) for t in tokens)
        trained = kind == "model"
        self.loss_mask.extend([1 if trained else 0] * len(tokens))
        if trained:
            if logprobs is None or len(logprobs) != len(tokens):
                raise ValueError("a model span needs one sampling log-prob per token")
            self.logprobs.extend(float(x) for x in logprobs)
        else:
            self.logprobs.extend([0.0] * len(tokens))
        self.spans.append(TurnSpan(kind, start, len(self.token_ids)))  # type: ignore[arg-type]


class SequenceEpisode:
    """The single-sequence layout: the whole episode as one append-only token sequence."""

    layout = "sequence"

    def __init__(self, fmt: ChatFormat, prompt_messages: list[dict[str, str]]) -> None:
        self.fmt = fmt
        self.sample = Sample(prompt_messages=[dict(m) for m in prompt_messages])
        self.sample.append("prompt", fmt.prompt_tokens(prompt_messages))
        self._last: Completion | None = None

    def context(self) -> list[int]:
        return self.sample.token_ids

    def add_model_turn(self, completion: Completion) -> None:
        if len(completion.logprobs) != len(completion.token_ids):
            raise ValueError("completion has a log-prob per token mismatch")
        self.sample.append("model", completion.token_ids, completion.logprobs)
        self._last = completion

    def add_observation(self, user_message: str, **_: Any) -> None:  # per-step keywords unused here
        if self._last is None:
            raise RuntimeError("add_observation before any model turn")
        self.sample.append("env", self.fmt.bridge_tokens(user_message, self._last))

    def drop_trailing_observation(self) -> None:
        """Remove a final env span (used when the episode is cut before the model could answer it)."""
        if self.sample.spans and self.sample.spans[-1].kind == "env":
            start = self.sample.spans.pop().start
            del self.sample.token_ids[start:], self.sample.loss_mask[start:], self.sample.logprobs[start:]

    def samples(self) -> list[Sample]:
        return [self.sample]


class PerStepEpisode:
    """The per-step layout: each step is its own sample (task + last H steps + current observation)."""

    layout = "per_step"

    def __init__(
        self,
        fmt: ChatFormat,
        system: str,
        first_user: str,
        render_step: Callable[[list[tuple[str, str]], str, dict[str, Any]], str],
        history: int,
        first_observation: str,
    ) -> None:
        if history < 0:
            raise ValueError(f"history must be >= 0, got {history}")
        self.fmt = fmt
        self.system = system
        self.history = history
        self.render_step = render_step
        #: (observation shown, action taken) for every step so far.
        self._steps: list[tuple[str, str]] = []
        self._shown = first_observation
        self._done: list[Sample] = []
        self._current = self._new_sample(first_user)

    def _new_sample(self, user: str) -> Sample:
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": user}]
        sample = Sample(prompt_messages=messages)
        sample.append("prompt", self.fmt.prompt_tokens(messages))
        return sample

    def context(self) -> list[int]:
        return self._current.token_ids

    def add_model_turn(self, completion: Completion) -> None:
        self._current.append("model", completion.token_ids, completion.logprobs)
        self._done.append(self._current)

    def add_observation(self, user_message: str, *, action: str, observation: str, info: dict[str, Any]) -> None:
        self._steps.append((self._shown, action))
        self._shown = observation
        recent = self._steps[-self.history :] if self.history else []
        self._current = self._new_sample(self.render_step(recent, observation, info))

    def samples(self) -> list[Sample]:
        return list(self._done)
