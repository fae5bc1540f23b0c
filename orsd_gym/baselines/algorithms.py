"""The baseline algorithms by name: SB3 classes with DRRN policies, and the random agent.

| name           | class                  | empty slots never chosen because ...                                   |
|----------------|------------------------|------------------------------------------------------------------------|
| `maskable_ppo` | sb3-contrib MaskablePPO | ``env.action_masks()`` (sb3-contrib's masking), and the DRRN scores    |
| `ppo`          | SB3 PPO                | the DRRN logits of empty slots are -1e8 (SB3 has no masking for PPO)   |
| `dqn`          | `MaskedDQN` (SB3 DQN)  | greedy: Q of empty slots is -1e8; exploration: `MaskedDQN` draws among  |
|                |                        | filled slots (SB3's DQN has no action masking; it would draw any slot) |
| `random`       | `RandomAdmissibleAgent` | it draws uniformly among filled slots                                  |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sb3_contrib import MaskablePPO
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm

from orsd_gym.baselines.policies import DRRNActorCriticPolicy, DRRNQPolicy, MaskableDRRNPolicy


def random_filled_slots(action_mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly drawn filled slot per row of ``action_mask`` (``[K]`` or ``[B, K]``).

    A row with no filled slot gets slot 0, which `AdmissibleChoice` plays as its defined
    empty-slot outcome.
    """
    masks = np.atleast_2d(np.asarray(action_mask).astype(bool))
    choices = [int(rng.choice(np.flatnonzero(row))) if row.any() else 0 for row in masks]
    return np.array(choices) if np.ndim(action_mask) == 2 else np.array(choices[0])


class MaskedDQN(DQN):
    """SB3's DQN whose random actions (warm-up and epsilon-greedy) are drawn among filled slots.

    The mask is read from the observation's ``"action_mask"`` (an `AdmissibleChoice` observation);
    the draws use the action space's Generator, which SB3 seeds with the model's seed.
    """

    def predict(
        self,
        observation: dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        # The coin flip uses numpy's global RNG, like SB3's own DQN.predict.
        if not deterministic and np.random.rand() < self.exploration_rate:
            return random_filled_slots(observation["action_mask"], self.action_space.np_random), state
        return self.policy.predict(observation, state, episode_start, deterministic)

    def _sample_action(
        self, learning_starts: int, action_noise: Any = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.num_timesteps < learning_starts:
            action = random_filled_slots(self._last_obs["action_mask"], self.action_space.np_random)
            return action, action
        return super()._sample_action(learning_starts, action_noise, n_envs)


class RandomAdmissibleAgent:
    """Uniformly random among the filled slots, i.e. among the admissible actions (all of them when
    the wrapper's ``max_actions`` is at least their number). Has SB3's ``predict`` signature."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def predict(
        self,
        observation: dict[str, np.ndarray],
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, None]:
        mask = observation["action_mask"] if action_masks is None else action_masks
        return random_filled_slots(mask, self.rng), None


@dataclass(frozen=True)
class Algorithm:
    """How `train_baseline` builds one SB3 algorithm."""

    cls: type[BaseAlgorithm]
    policy: type
    #: Defaults sized for small, sparse-reward text tasks; ``algo_kwargs`` override them.
    defaults: dict[str, Any] = field(default_factory=dict)
    #: Whether ``predict`` takes ``action_masks`` (sb3-contrib's maskable algorithms do).
    takes_action_masks: bool = False


_PPO_DEFAULTS = {
    "n_steps": 64,
    "batch_size": 64,
    "n_epochs": 10,
    "learning_rate": 1e-3,
    "ent_coef": 0.01,
    "gamma": 0.95,
}

SB3_ALGORITHMS: dict[str, Algorithm] = {
    "maskable_ppo": Algorithm(MaskablePPO, MaskableDRRNPolicy, _PPO_DEFAULTS, takes_action_masks=True),
    "ppo": Algorithm(PPO, DRRNActorCriticPolicy, _PPO_DEFAULTS),
    "dqn": Algorithm(
        MaskedDQN,
        DRRNQPolicy,
        {
            "learning_rate": 5e-4,
            "buffer_size": 20_000,
            "learning_starts": 200,
            "train_freq": 4,
            "target_update_interval": 250,
            "exploration_fraction": 0.3,
            "gamma": 0.95,
        },
    ),
}
ALGORITHMS = (*SB3_ALGORITHMS, "random")
