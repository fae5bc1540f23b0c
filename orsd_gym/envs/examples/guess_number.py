"""A small text env written the way a user would write their own: guess the hidden number.

It is also the toolkit's fastest real env (no engine, microseconds per step), which makes it
the workhorse of the policy, rollout and trainer tests.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from orsd_gym.envs.base import StepOutcome, TextEnv

_GUESS = re.compile(r"^\s*guess\s+(-?\d+)\s*$", re.IGNORECASE)


class GuessNumberEnv(TextEnv):
    """Find a hidden integer in ``[1, high]`` with ``guess N``; the env answers higher/lower.

    Tasks are the hidden numbers ``1..high`` (task k hides ``k + 1``). Reward 1.0 on the
    right guess (terminated).
    """

    def __init__(self, high: int = 20, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if not isinstance(high, int) or high < 2:
            raise ValueError(f"high must be an int >= 2, got {high!r}")
        self.high = high
        self._targets = tuple(range(1, high + 1))
        self._low_bound = 1
        self._high_bound = high

    @property
    def tasks(self) -> Sequence[int]:
        return self._targets

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
