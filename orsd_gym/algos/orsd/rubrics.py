"""Rubric proposal prompts and robust parsing of the bundles a model writes.

The proposer sees the task and the group's attempts rendered compactly (actions and short
observations). It never sees rewards, success flags or an observation that states the outcome
(see `render_attempt`): the rubric must be a hypothesis about *process*, and the outcome is only
used afterwards to select among hypotheses.

Small models (SmolLM2-135M) rarely answer an instruction with a clean numbered list. Two things
help them: a worked example, one request of the same form for a *different* kind of task
answered with a bundle, shown as an earlier chat turn (the env's own, `TextEnv.rubric_examples`:
an env with none gets none), and a parser that also takes what they write instead of a list:
"Criterion: ..." labels and plain sentences one per line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from orsd_gym.envs.base import REVEALS_OUTCOME
from orsd_gym.envs.presentation import WorkedExample
from orsd_gym.rollout.trajectory import Trajectory

DEFAULT_PROPOSAL_SYSTEM = "You are an expert reviewer of how agents solve text-based tasks."

DEFAULT_PROPOSAL_TEMPLATE = (
    "Task: {task}\n\n"
    "Here are {num_attempts} attempts by an agent at this task:\n\n{attempts}\n\n"
    "Write up to {max_criteria} short, checkable criteria that distinguish a good way of solving "
    "this task from a bad one. Each criterion must be about the process (what the agent does and "
    "in which order), answerable with yes or no for any attempt. Answer with a numbered list only."
)

DEFAULT_OFFLINE_PROPOSAL_TEMPLATE = (
    "Task: {task}\n\n"
    "Write up to {max_criteria} short, checkable criteria that distinguish a good way of solving "
    "this task from a bad one. Each criterion must be about the process (what the agent does and "
    "in which order), answerable with yes or no for any attempt. Answer with a numbered list only."
)

# A list item: "1." "1)" "(1)" "1:" "Step 1." "- " "* " "• " "a)" followed by the text.
_ITEM = re.compile(
    r"""^\s*(?:
        (?:criterion|step|rule)?\s*\(?\d{1,2}\s*[.):\]]\s*   # numbered
      | [-*•+·–]\s+                                          # bulleted
      | \(?[a-hA-H]\)\s+                                      # lettered
    )(?P<text>\S.*)$""",
    re.VERBOSE | re.IGNORECASE,
)
# Several numbered items run together on one line: "1. foo 2. bar".
_INLINE_NUMBER = re.compile(r"\s(?=\d{1,2}[.)]\s+\S)")
_MARKUP = re.compile(r"[*_`#]+")
# "Criterion 2:", or a number left behind a bullet ("- 1: ...").
_LEADING_LABEL = re.compile(r"^(?:(?:criterion|check|rule)\s*\d*|\d{1,2})\s*[:.)-]\s*", re.IGNORECASE)
# Code a model writes instead of prose ("done = False", "def f():", "{...}").
_CODE = re.compile(r"[=;{}]|\(\)|^def\s")
# A sentence has function words; a run of random or glued-together words ("nyder Conservation
# regime MR happy", "DELIVERINGANDSECRECHING") has none.
_FUNCTION_WORD = re.compile(
    r"\b(?:the|a|an|to|of|in|on|at|from|with|before|after|and|or|not|no|it|its|is|are|does|do|has|by|for|into|"
    r"then|only|first|each|any|all|every|when|while|until|once)\b",
    re.IGNORECASE,
)
# A plain line that introduces or closes an answer rather than stating a criterion.
_CHATTER = re.compile(
    r"^(?:sure|here (?:are|is)|certainly|of course|okay|ok|i hope|hope this|let me|these criteria|"
    r"(?:the )?criteria|task|attempt [a-z0-9]+)\b",
    re.IGNORECASE,
)


@dataclass
class ParseLimits:
    """What counts as a usable criterion."""

    min_chars: int = 8
    max_chars: int = 200


def parse_criteria(
    text: str,
    max_criteria: int,
    limits: ParseLimits | None = None,
    *,
    plain_lines: bool = True,
    copies: Sequence[str] = (),
) -> list[str]:
    """The criteria of one model-written bundle, in order, at most ``max_criteria``.

    Accepts numbered, bulleted or lettered lists mixed with extra prose (which is ignored),
    strips markdown and "Criterion 1:" labels, drops items that are too short or too long and
    duplicates. With ``plain_lines`` (the default), an answer without any list item is read
    line by line instead: "Criterion: ..." lines and plain sentences count; lines that only
    introduce or close the answer ("Sure! Here are ...:", "I hope this helps"), code and runs of
    words without a single function word (random or glued-together tokens) do not. Either way,
    a criterion naming one of ``copies`` (the worked examples' objects, `WorkedExample.thing`) is
    a copy of an example and is dropped. An empty result means the bundle is malformed.
    """
    if max_criteria < 1:
        raise ValueError(f"max_criteria must be >= 1, got {max_criteria}")
    limits = limits or ParseLimits()
    copied = re.compile(r"\b(?:" + "|".join(map(re.escape, copies)) + r")\b", re.IGNORECASE) if copies else None
    items = [
        match.group("text")
        for line in text.splitlines()
        for piece in _INLINE_NUMBER.split(line)
        if (match := _ITEM.match(piece)) is not None
    ]
    if not items and plain_lines:
        items = [line for line in text.splitlines() if _reads_as_a_sentence(line)]
    criteria: list[str] = []
    seen: set[str] = set()
    for raw_item in items:
        item = _clean(raw_item)
        key = item.lower()
        # A heading ("Scaling:") introduces items, it is not one.
        if (
            not limits.min_chars <= len(item) <= limits.max_chars
            or item.endswith(":")
            or key in seen
            or (copied is not None and copied.search(item))
        ):
            continue
        seen.add(key)
        criteria.append(item)
        if len(criteria) == max_criteria:
            break
    return criteria


def _reads_as_a_sentence(line: str) -> bool:
    """Whether a plain (unlisted) line can be a criterion: three words or more with a function
    word, neither code nor a line that introduces or closes the answer."""
    return (
        len(line.split()) >= 3
        and _FUNCTION_WORD.search(line) is not None
        and not _CODE.search(line)
        and not _CHATTER.match(_clean(line))
    )


def _clean(item: str) -> str:
    item = _MARKUP.sub("", item).strip()
    item = _LEADING_LABEL.sub("", item).strip()
    return item.strip(" \"'").strip()


def render_attempt(trajectory: Trajectory, *, max_obs_chars: int = 160, max_steps: int = 30) -> str:
    """An attempt as alternating actions and (shortened) observations, without the outcome.

    The observation after the last action is never shown, whether the episode terminated
    there ("Correct!", WebShop's score page) or was cut by a budget: hiding it only when the
    episode terminated would itself tell which attempts ended by reaching the goal. An
    observation the env marked with ``info[REVEALS_OUTCOME]`` is replaced by a placeholder.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    last = len(trajectory.actions)
    steps = [
        (action, _judgeable_observation(trajectory, number, last))
        for number, action in enumerate(trajectory.actions, start=1)
    ]
    # Long episodes keep their beginning and their end (where they succeed or stall).
    head = (max_steps + 1) // 2
    tail = max_steps - head
    shown = list(enumerate(steps, start=1))
    if len(steps) > max_steps:
        shown = shown[:head] + [None] + (shown[-tail:] if tail else [])
    lines = []
    for item in shown:
        if item is None:
            lines.append(f"  ... ({len(steps) - max_steps} steps omitted)")
            continue
        number, (action, observation) = item
        lines.append(f"  {number}. > {_one_line(action, 120)}")
        if observation is not None:
            lines.append(f"     {_one_line(observation, max_obs_chars)}")
    if not steps:
        lines.append("  (no actions)")
    return "\n".join(lines)


def _judgeable_observation(trajectory: Trajectory, number: int, last: int) -> str | None:
    """What a judge may read of the observation after action ``number`` (None: nothing)."""
    if number == last or number >= len(trajectory.observations):
        return None
    info = trajectory.infos[number] if number < len(trajectory.infos) else {}
    return (
        "(observation hidden: it states the outcome)" if info.get(REVEALS_OUTCOME) else trajectory.observations[number]
    )


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def proposal_messages(
    task: str,
    attempts: Sequence[Trajectory] | None,
    *,
    max_criteria: int,
    system: str = DEFAULT_PROPOSAL_SYSTEM,
    template: str = DEFAULT_PROPOSAL_TEMPLATE,
    max_obs_chars: int = 160,
    max_steps: int = 30,
    example: WorkedExample | None = None,
) -> list[dict[str, str]]:
    """Chat messages asking for one rubric bundle; ``attempts=None`` for offline (task-only) rubrics.

    With an ``example`` (the env's, `orsd_gym.envs.presentation.example_for`), the request is
    preceded by it: the same template filled with its task and attempts as a user turn,
    answered by its bundle (at most ``max_criteria`` criteria, as a numbered list) as an
    assistant turn.
    """
    attempts = list(attempts or [])
    rendered = [render_attempt(t, max_obs_chars=max_obs_chars, max_steps=max_steps) for t in attempts]
    messages = [{"role": "system", "content": system}] if system else []
    if example is not None:
        answer = "\n".join(f"{n}. {criterion}" for n, criterion in enumerate(example.bundle[:max_criteria], start=1))
        messages += [
            {"role": "user", "content": _request(template, example.task, example.attempts, max_criteria)},
            {"role": "assistant", "content": answer},
        ]
    return messages + [{"role": "user", "content": _request(template, task, rendered, max_criteria)}]


def _request(template: str, task: str, rendered_attempts: Sequence[str], max_criteria: int) -> str:
    attempts = "\n\n".join(
        f"Attempt {letter}:\n{text}"
        for letter, text in zip(_labels(len(rendered_attempts)), rendered_attempts, strict=True)
    )
    try:
        return template.format(
            task=task, attempts=attempts, num_attempts=len(rendered_attempts), max_criteria=max_criteria
        )
    except (KeyError, IndexError) as error:
        raise ValueError(
            f"rubric proposal template has an unknown placeholder {error}; use {{task}}, {{attempts}}, "
            "{num_attempts}, {max_criteria}"
        ) from None


def _labels(n: int) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else str(i + 1) for i in range(n)]


def format_rubric(criteria: Sequence[str]) -> str:
    """A bundle as the text inserted into the privileged context."""
    return "\n".join(f"- {c}" for c in criteria)
