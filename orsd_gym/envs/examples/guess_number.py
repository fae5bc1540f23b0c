"""A small text env written the way a user would write their own: guess the hidden number.

It is also the toolkit's fastest real env (no engine, microseconds per step), which makes it
the workhorse of the policy, rollout and trainer tests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from orsd_gym.envs.base import StepOutcome, TaskSplits, TextEnv
from orsd_gym.envs.presentation import EnvPrompt
from orsd_gym.errors import TaskSplitError

_GUESS = re.compile(r"^\s*guess\s+(-?\d+)\s*$", re.IGNORECASE)
SPLITS = ("all", "train", "eval")
#: Hidden numbers that are multiples of this are the held-out evaluation tasks.
EVAL_EVERY = 5


class GuessNumberEnv(TextEnv):
    """Find a hidden integer in ``[1, high]`` with ``guess N``; the env answers higher/lower.

    Tasks are hidden numbers in ``1..high``: all of them (``split="all"``, task k hides
    ``k + 1``), the multiples of 5 (``split="eval"``, the held-out tasks) or the others
    (``split="train"``). Reward 1.0 on the right guess (terminated).
    """

    prompt = EnvPrompt(
        "You are playing a guessing game. Find the hidden number with as few guesses as possible. "
        "Actions look like 'guess 7'; after each guess you are told to go higher or lower.",
        show_admissible=False,
        noop_action="guess 1",
    )

    def __init__(self, high: int = 20, split: str = "all", render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if not isinstance(high, int) or high < 2:
            raise ValueError(f"high must be an int >= 2, got {high!r}")
        if split not in SPLITS:
            raise ValueError(f"split={split!r}; choose one of {SPLITS}")
        self.high = high
        self.split = split
        self._targets = tuple(
            n for n in range(1, high + 1) if split == "all" or (n % EVAL_EVERY == 0) == (split == "eval")
        )
        self._low_bound = 1
        self._high_bound = high

    @property
    def tasks(self) -> Sequence[int]:
        return self._targets

    @classmethod
    def task_splits(cls, kwargs: Mapping[str, Any]) -> TaskSplits:
        if kwargs.get("split", "all") not in SPLITS:
            raise ValueError(f"split={kwargs['split']!r}; choose one of {SPLITS}")
        if kwargs.get("split", "all") == "eval":
            raise TaskSplitError("split='eval' holds GuessNumber's held-out numbers; train on split='train'")
        return TaskSplits(
            train={"split": "train"},
            held_out={"split": "eval"},
            description=f"hidden numbers that are multiples of {EVAL_EVERY} are held out",
        )

    def task_key(self, task_id: int) -> str:
        return f"1..{self.high}:number-{self._targets[task_id]}"

    def _task_text(self, task_id: int) -> str:
        return f"Find the hidden number between 1 and {self.high}."

    def _start_task(self, task_id: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._low_bound, self._high_bound = 1, self.high
        observation = (
            f"I am thinking of a number between 1 and {self.high}. "
            "Reply with 'guess N' and I will say higher or lower.\n"
            f"Your task is to: {self._task_text(task_id)}"
        )
        return observation, {}

    def admissible_actions(self) -> list[str]:
        return [f"guess {n}" for n in range(self._low_bound, self._high_bound + 1)]

    def _play(self, action: str) -> StepOutcome:
        match = _GUESS.match(action)
        if match is None:
            return StepOutcome("Nothing happens. Reply with 'guess N'.", is_valid_action=False)
        guess = int(match.group(1))
        if not 1 <= guess <= self.high:
            return StepOutcome(f"Nothing happens. {guess} is outside 1..{self.high}.", is_valid_action=False)
        target = self._targets[self.task_id]
        if guess == target:
            return StepOutcome(f"Correct, the number is {target}!", reward=1.0, terminated=True, won=True)
        if guess < target:
            self._low_bound = max(self._low_bound, guess + 1)
            return StepOutcome(f"{guess} is too low. Try higher.")
        self._high_bound = min(self._high_bound, guess - 1)
        return StepOutcome(f"{guess} is too high. Try lower.")
