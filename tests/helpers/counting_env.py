"""GuessNumber that counts the steps it is sent (to check that idle vector-env slots are never stepped)."""

from __future__ import annotations

from orsd_gym.envs import register_text_env
from orsd_gym.envs.examples.guess_number import GuessNumberEnv


class CountingGuessEnv(GuessNumberEnv):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps_taken = 0

    def step(self, action):
        self.steps_taken += 1
        return super().step(action)


ENV_ID = register_text_env(
    "CountingGuess", f"{__name__}:CountingGuessEnv", max_episode_steps=10, description="test env"
)
