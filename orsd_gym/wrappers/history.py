"""`HistoryObservation`: one text observation with the task, the recent steps and the current observation."""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym

from orsd_gym.envs.base import MAX_ACTION_CHARS, MAX_OBSERVATION_CHARS
from orsd_gym.envs.spaces import UnicodeText, drop_non_text_characters


class HistoryObservation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Replace each text observation with the task, the last ``k`` steps and the current observation.

    Many envs (ALFWorld after the first step, for instance) no longer mention the task or the room
    in later observations, so a memoryless policy needs them in every observation. The text uses
    the layout of the rollouts' per-step prompts::

        Your task is: <info["task"]>

        Your last 2 steps:
        Observation: <observation shown>
        Action: <action taken>
        ...

        Current observation:
        <observation>

    Each step pairs the observation an action was taken in with the action, so the sequence reads
    o0 a1 o1 a2 ... and the current observation (the outcome of the last action) closes it. The
    observation space stays `UnicodeText`; when the text would exceed its length cap the oldest
    steps are dropped first, then the start of the text.
    """

    def __init__(self, env: gym.Env, k: int = 2) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, k=k)
        gym.Wrapper.__init__(self, env)
        if not isinstance(k, int) or k < 0:
            raise ValueError(f"k (steps of history) must be an int >= 0, got {k!r}")
        self.k = k
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self._task = ""
        self._steps: deque[tuple[str, str]] = deque(maxlen=k)
        self._shown = ""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        self._task = str(info.get("task", ""))
        self._steps.clear()
        self._shown = observation
        return self._render(), info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self.k:
            # The action is shown back as text: keep the observation a member of its space.
            self._steps.append((self._shown, drop_non_text_characters(str(action)[:MAX_ACTION_CHARS])))
        self._shown = observation
        return self._render(), reward, terminated, truncated, info

    def _render(self) -> str:
        steps = list(self._steps)
        while True:
            text = _layout(self._task, steps, self._shown)
            if len(text) <= self.observation_space.max_length or not steps:
                break
            steps.pop(0)
        # Keep the end: the current observation matters most.
        return text[-self.observation_space.max_length :]


def _layout(task: str, steps: list[tuple[str, str]], observation: str) -> str:
    parts = [f"Your task is: {task}"]
    if steps:
        lines = "\n".join(f"Observation: {shown}\nAction: {action}" for shown, action in steps)
        parts.append(f"Your last {len(steps)} steps:\n{lines}")
    parts.append(f"Current observation:\n{observation}")
    return "\n\n".join(parts)
