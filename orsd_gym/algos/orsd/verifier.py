"""A frozen verifier that judges attempts against rubric criteria without generating.

Each (attempt, criterion) pair becomes a yes/no question rendered with the verifier's chat
template; the answer is read from the next-token distribution after the generation prompt:
``prob`` gives P(yes) = p_yes / (p_yes + p_no), renormalised over the yes/no surface forms
(small models put most mass elsewhere, the ratio is what carries the judgement); ``binary``
gives 1.0 when yes is the likelier of the two, else 0.0. All pairs go through one batched
`Policy.next_token_logprobs` call per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from orsd_gym.errors import VerifierError
from orsd_gym.policies.base import Policy

Scoring = Literal["prob", "binary"]

DEFAULT_VERIFIER_SYSTEM = "You are a strict judge. You answer every question with a single word: Yes or No."

DEFAULT_VERIFIER_TEMPLATE = (
    "Task: {task}\n\nAn agent's attempt at the task:\n{attempt}\n\n"
    "Criterion: {criterion}\n\nDoes the attempt satisfy the criterion? Answer Yes or No."
)

#: Surface forms of the two answers, in pairs: a pair counts only when both of its forms are
#: single tokens, so neither answer gets surface forms the other lacks (with SmolLM2's
#: tokenizer "YES" is two tokens while "NO" is one; keeping "NO" alone would tilt every score).
ANSWER_PAIRS = (("Yes", "No"), ("yes", "no"), (" Yes", " No"), (" yes", " no"), ("YES", "NO"))


@dataclass(frozen=True)
class Judgement:
    """One question for the verifier."""

    task: str
    attempt: str
    criterion: str


def answer_token_ids(tokenizer, pairs: Sequence[tuple[str, str]] = ANSWER_PAIRS) -> tuple[list[int], list[int]]:
    """Yes ids and no ids of the answer pairs whose two forms are both single tokens for
    ``tokenizer`` (deduplicated, in order)."""
    yes_ids: list[int] = []
    no_ids: list[int] = []
    for yes_form, no_form in pairs:
        yes = tokenizer.encode(yes_form, add_special_tokens=False)
        no = tokenizer.encode(no_form, add_special_tokens=False)
        if len(yes) != 1 or len(no) != 1 or yes[0] in yes_ids or no[0] in no_ids:
            continue
        yes_ids.append(int(yes[0]))
        no_ids.append(int(no[0]))
    return yes_ids, no_ids


class Verifier:
    """Scores judgements in [0, 1] with a frozen policy."""

    def __init__(
        self,
        policy: Policy,
        *,
        scoring: Scoring = "prob",
        system: str = DEFAULT_VERIFIER_SYSTEM,
        template: str = DEFAULT_VERIFIER_TEMPLATE,
        chunk_size: int = 64,
    ) -> None:
        if scoring not in ("prob", "binary"):
            raise ValueError(f"verifier scoring must be 'prob' or 'binary', got {scoring!r}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.policy = policy
        self.scoring = scoring
        self.system = system
        self.template = template
        self.chunk_size = chunk_size
        self.yes_ids, self.no_ids = answer_token_ids(policy.tokenizer)
        if not self.yes_ids or not self.no_ids or set(self.yes_ids) & set(self.no_ids):
            raise VerifierError(
                "the verifier's tokenizer has no single-token 'Yes'/'No' answers "
                f"(yes ids {self.yes_ids}, no ids {self.no_ids}); configure another verifier model"
            )

    def context(self, judgement: Judgement) -> list[int]:
        try:
            user = self.template.format(task=judgement.task, attempt=judgement.attempt, criterion=judgement.criterion)
        except (KeyError, IndexError) as error:
            raise ValueError(
                f"verifier template has an unknown placeholder {error}; use {{task}}, {{attempt}}, {{criterion}}"
            ) from None
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": user}
        ]
        # P("yes") is read right after the generation prompt: with thinking on, a reasoning
        # template would put "<think>" there instead of an answer.
        return self.policy.chat.prompt_tokens(messages, thinking=False)

    def score(self, judgements: Sequence[Judgement]) -> np.ndarray:
        """Score of every judgement, in order (float64 in [0, 1])."""
        contexts = [self.context(j) for j in judgements]
        out = np.zeros(len(contexts), dtype=np.float64)
        yes = torch.tensor(self.yes_ids)
        no = torch.tensor(self.no_ids)
        for start in range(0, len(contexts), self.chunk_size):
            with torch.no_grad():
                logprobs = self.policy.next_token_logprobs(contexts[start : start + self.chunk_size]).float().cpu()
            lse_yes = torch.logsumexp(logprobs[:, yes], dim=-1)
            lse_no = torch.logsumexp(logprobs[:, no], dim=-1)
            if self.scoring == "prob":
                values = torch.sigmoid(lse_yes - lse_no)
            else:
                values = (lse_yes > lse_no).double()
            out[start : start + len(values)] = values.double().numpy()
        return out
