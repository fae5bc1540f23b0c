"""A user-registered env whose observations are a page dump: far longer than a sample's token
budget leaves the model's turn (used by the observation-budget tests)."""

from __future__ import annotations

from orsd_gym.envs import StepOutcome, TextEnv, register_text_env
from orsd_gym.envs.base import MAX_OBSERVATION_CHARS


class PageDumpEnv(TextEnv):
    """Each observation is ``size`` characters of a log (a TextEnv caps it at its maximum);
    the reward is the share of vowels in the action, so even a random model's group differs.
    ``first_only``: only the first observation is huge."""

    themes = ("apache", "kernel", "nginx", "cron", "mail", "dns", "ssh", "disk", "proxy", "queue")

    def __init__(self, size: int = MAX_OBSERVATION_CHARS, first_only: bool = False, render_mode=None) -> None:
        super().__init__(render_mode=render_mode)
        self.size, self.first_only = size, first_only

    @property
    def tasks(self):
        return self.themes

    def _task_text(self, task_id):
        return f"Find the error in the {self.themes[task_id]} log."

    def _page(self, task_id: int) -> str:
        line = f"[{self.themes[task_id]}] 12:00:01 request served in 3 ms\n"
        return (line * (self.size // len(line) + 1))[: self.size]

    def _start_task(self, task_id, options):
        return f"Your task is to: {self._task_text(task_id).lower()}\n{self._page(task_id)}", {}

    def _play(self, action):
        letters = [c for c in action.lower() if c.isalpha()]
        score = sum(c in "aeiou" for c in letters) / max(1, len(letters))
        page = "Nothing more." if self.first_only else self._page(self._task_id)
        return StepOutcome(f"Score {score:.2f}.\n{page}", reward=score, terminated=False, won=score > 0.5)


ENV_ID = register_text_env("PageDumpTest", f"{__name__}:PageDumpEnv", max_episode_steps=3, description="test env")
