"""`ChatRenderer`: the one place a model's chat template becomes tokens.

Rollouts, ORSD's privileged replay, the rubric proposer and the verifier all render through it,
so a prompt is tokenised the same way everywhere:

* a prompt always ends with the template's generation prompt (the model answers after it);
* ``thinking`` flips the template's reasoning switch (Qwen3's ``enable_thinking``) where it has
  one, per call; None keeps the renderer's own setting (what the policy's rollouts use);
* a *bridge* is what the template puts between the end of an assistant turn's content and the
  next assistant turn's content (end of turn, user header, the user message, assistant header).
  It is read off the template itself by rendering a dummy conversation with a placeholder
  assistant turn, so any template works (ChatML, Qwen3 with thinking tags, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orsd_gym.errors import ChatTemplateError
from orsd_gym.policies.base import Completion

_PLACEHOLDER = "\u27e6orsd-assistant-turn\u27e7"


class ChatRenderer:
    """A tokenizer's chat template with fixed template arguments."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})

    def render_text(self, messages: Sequence[dict[str, str]], *, thinking: bool | None = None) -> str:
        """``messages`` and the generation prompt, as text."""
        if not getattr(self.tokenizer, "chat_template", None):
            # Checked here, not at construction: a model without a template can still score.
            raise ChatTemplateError(
                "the tokenizer has no chat_template; set tokenizer.chat_template to a Jinja template"
            )
        template_kwargs = dict(self.template_kwargs)
        if thinking is not None:
            # Templates without the switch never read the variable, so passing it is harmless.
            template_kwargs["enable_thinking"] = thinking
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=False, add_generation_prompt=True, **template_kwargs
        )

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added (template text carries its own)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_tokens(self, messages: Sequence[dict[str, str]], *, thinking: bool | None = None) -> list[int]:
        """Token ids of ``messages`` and the generation prompt: a context the model answers."""
        return self.encode(self.render_text(messages, thinking=thinking))

    def bridge_text(self, user_message: str) -> str:
        """Text between the end of an assistant turn's content and the next assistant turn's content."""
        dummy = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _PLACEHOLDER},
            {"role": "user", "content": user_message},
        ]
        text = self.render_text(dummy)
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

    def end_of_turn_tokens(self, text: str) -> list[int]:
        """``text`` as an assistant turn that ended itself: its tokens and the end-of-sequence
        token (how a scripted turn, e.g. a demonstration, is laid out like a sampled one)."""
        eos = self.tokenizer.eos_token_id
        return self.encode(text) + ([int(eos)] if eos is not None else [])
