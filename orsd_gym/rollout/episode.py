"""Token-aware masking by construction: an episode becomes token ids + loss mask as it is played.

Single-sequence layout (`SequenceEpisode`), one growing token sequence per episode:

* prompt (system + first user turn) rendered with the chat template: mask 0;
* each model turn: exactly the sampled token ids (never re-tokenised): mask 1 with their
  sampling log-probs;
* each env reply: the template's *bridge* (end of the assistant turn unless the model already
  sampled it, user header, observation text, end of user turn, assistant header; see
  `orsd_gym.policies.chat.ChatRenderer`), tokenised on its own and appended: mask 0.

Because tokens are only ever appended, the prefix never changes between turns (which is also
what lets the policy's KV cache be reused).

Per-step layout (`PerStepEpisode`, as verl-agent does): every step is its own sample, a fresh
prompt (task + last H turns + current observation) followed by the sampled tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orsd_gym.policies.base import Completion
from orsd_gym.policies.chat import ChatRenderer
from orsd_gym.rollout.trajectory import TurnSpan

#: Rewrites an episode's prompt messages before they are rendered: called with the messages, the
#: episode's reset info and its ``group_id``; returns the messages to use (e.g. with a rubric
#: inserted, `orsd_gym.probes.teacher`). Applied to every sample's prompt in the per-step layout.
PromptEdit = Callable[[list[dict[str, str]], dict[str, Any], int], list[dict[str, str]]]

#: A `PromptEdit` bound to one episode: rewrites a sample's prompt messages.
MessageEdit = Callable[[list[dict[str, str]]], list[dict[str, str]]]


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

    def __init__(
        self, chat: ChatRenderer, prompt_messages: list[dict[str, str]], edit: MessageEdit | None = None
    ) -> None:
        self.chat = chat
        shown = edit(prompt_messages) if edit is not None else prompt_messages
        #: Whether ``edit`` changed the prompt (what the policy saw is not what the env presents).
        self.edited = shown != prompt_messages
        prompt_messages = shown
        self.sample = Sample(prompt_messages=[dict(m) for m in prompt_messages])
        self.sample.append("prompt", chat.prompt_tokens(prompt_messages))
        self._last: Completion | None = None

    def context(self) -> list[int]:
        return self.sample.token_ids

    def add_model_turn(self, completion: Completion) -> None:
        if len(completion.logprobs) != len(completion.token_ids):
            raise ValueError("completion has a log-prob per token mismatch")
        self.sample.append("model", completion.token_ids, completion.logprobs)
        self._last = completion

    def add_observation(self, user_message: str, **_: Any) -> None:  # per-step keywords unused here
        self.sample.append("env", self._bridge(user_message))

    def context_after(self, user_message: str, **_: Any) -> int:
        """The context's length were ``user_message`` added (`add_observation`'s arguments)."""
        return len(self.sample.token_ids) + len(self._bridge(user_message))

    def _bridge(self, user_message: str) -> list[int]:
        if self._last is None:
            raise RuntimeError("add_observation before any model turn")
        return self.chat.bridge_tokens(user_message, self._last)

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
        chat: ChatRenderer,
        system: str,
        first_user: str,
        render_step: Callable[[list[tuple[str, str]], str, dict[str, Any]], str],
        history: int,
        first_observation: str,
        edit: MessageEdit | None = None,
    ) -> None:
        if history < 0:
            raise ValueError(f"history must be >= 0, got {history}")
        self.chat = chat
        self.system = system
        self.history = history
        self.render_step = render_step
        self.edit = edit
        self.edited = False
        #: (observation shown, action taken) for every step so far.
        self._steps: list[tuple[str, str]] = []
        self._shown = first_observation
        self._done: list[Sample] = []
        self._current = self._new_sample(first_user)

    def _new_sample(self, user: str) -> Sample:
        messages, edited = self._messages(user)
        self.edited = self.edited or edited
        sample = Sample(prompt_messages=messages)
        sample.append("prompt", self.chat.prompt_tokens(messages))
        return sample

    def _messages(self, user: str) -> tuple[list[dict[str, str]], bool]:
        """A step's prompt messages, and whether ``edit`` changed them."""
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": user}]
        shown = self.edit(messages) if self.edit is not None else messages
        return shown, shown != messages

    def context(self) -> list[int]:
        return self._current.token_ids

    def add_model_turn(self, completion: Completion) -> None:
        self._current.append("model", completion.token_ids, completion.logprobs)
        self._done.append(self._current)

    def add_observation(self, user_message: str, *, action: str, observation: str, info: dict[str, Any]) -> None:
        self._steps.append((self._shown, action))
        self._shown = observation
        self._current = self._new_sample(self.render_step(self._recent(self._steps), observation, info))

    def context_after(self, user_message: str, *, action: str, observation: str, info: dict[str, Any]) -> int:
        """The context's length were this observation added (`add_observation`'s arguments)."""
        steps = [*self._steps, (self._shown, action)]
        messages, _ = self._messages(self.render_step(self._recent(steps), observation, info))
        return len(self.chat.prompt_tokens(messages))

    def _recent(self, steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return steps[-self.history :] if self.history else []

    def samples(self) -> list[Sample]:
        return list(self._done)
