"""`AdmissibleChoice`: a text env as a `Discrete(K)` choice among its admissible actions.

Classic RL libraries (stable-baselines3 and friends) cannot consume text spaces. This wrapper
turns a text env that lists ``info["admissible_actions"]`` into fixed-size arrays: the state and
up to K candidate actions, each encoded by a `TextEncoder`, plus a slot mask. Action ``i`` plays
the action text in slot ``i``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from orsd_gym.errors import NoAdmissibleActionsError
from orsd_gym.wrappers.encoders import HashedBagOfWords, TextEncoder

#: What is sent to the env when the chosen slot holds no action (empty slot or out of range).
EMPTY_SLOT_ACTION = ""


class AdmissibleChoice(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """``Discrete(max_actions)`` actions over the current ``info["admissible_actions"]``.

    Observation (a ``Dict``):

    * ``"state"``: ``[dim]`` float32, the encoded text observation (wrap the env in
      `HistoryObservation` first if the task and recent steps should be part of it);
    * ``"actions"``: ``[max_actions, dim]`` float32, the encoded action in each slot (zeros in
      empty slots);
    * ``"action_mask"``: ``MultiBinary(max_actions)``, 1 where a slot holds an action.

    ``action_masks()`` returns the same mask as booleans: sb3-contrib's MaskablePPO calls it on
    the env (through ``env_method`` in a ``DummyVecEnv`` / ``SubprocVecEnv``).

    **More than max_actions admissible actions**: a uniform sample of ``max_actions`` of them is
    kept, in the env's order, drawn from the wrapper's own Generator. Truncating to the first K
    would make every action listed after position K unreachable for the whole run (a task could
    become unwinnable forever); a sample keeps each action reachable. The Generator is reseeded by
    ``reset(seed=s)`` and otherwise continues, so an episode started with ``reset(seed=s)`` always
    gets the same slots, and a run of bare resets after it is reproducible as a whole.
    ``info["dropped_actions"]`` counts what was left out.

    **Choosing an empty slot** (masked out, or an index outside ``[0, max_actions)``) is not an
    error: the wrapper sends `EMPTY_SLOT_ACTION` (the empty string) to the env, which by the text-env
    contract answers with its invalid-action feedback and spends a step; ``info["empty_slot"]`` is
    True. Every step's ``info["chosen_action"]`` is the text that was sent.
    """

    def __init__(
        self, env: gym.Env, max_actions: int = 16, encoder: TextEncoder | None = None, *, seed: int = 0
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, max_actions=max_actions, encoder=encoder, seed=seed)
        gym.Wrapper.__init__(self, env)
        if not isinstance(max_actions, int) or max_actions < 1:
            raise ValueError(f"max_actions must be an int >= 1, got {max_actions!r}")
        self.max_actions = max_actions
        self.encoder = encoder if encoder is not None else HashedBagOfWords()
        dim = self.encoder.dim
        self.observation_space = spaces.Dict(
            {
                "state": spaces.Box(-np.inf, np.inf, shape=(dim,), dtype=np.float32),
                "actions": spaces.Box(-np.inf, np.inf, shape=(max_actions, dim), dtype=np.float32),
                "action_mask": spaces.MultiBinary(max_actions),
            }
        )
        self.action_space = spaces.Discrete(max_actions)
        self._rng = np.random.default_rng(seed)
        self._slots: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        observation, info = self.env.reset(seed=seed, options=options)
        if not info.get("admissible_actions"):
            raise NoAdmissibleActionsError(
                f"{self.env.unwrapped} reported no info['admissible_actions'] at reset; AdmissibleChoice "
                "needs an env that lists its legal actions (see TextEnv.admissible_actions)."
            )
        return self._observe(observation, info), info

    def step(self, action: Any):
        slot = int(np.asarray(action).item())
        is_filled = 0 <= slot < len(self._slots)
        text = self._slots[slot] if is_filled else EMPTY_SLOT_ACTION
        observation, reward, terminated, truncated, info = self.env.step(text)
        info = dict(info, chosen_action=text, empty_slot=not is_filled)
        return self._observe(observation, info), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """``[max_actions]`` booleans: True where a slot holds an admissible action."""
        mask = np.zeros(self.max_actions, dtype=bool)
        mask[: len(self._slots)] = True
        return mask

    @property
    def slots(self) -> list[str]:
        """The action texts in the current slots (slot i plays ``slots[i]``)."""
        return list(self._slots)

    def _observe(self, observation: str, info: dict[str, Any]) -> dict[str, np.ndarray]:
        admissible = [str(a) for a in info.get("admissible_actions") or []]
        if len(admissible) > self.max_actions:
            kept = np.sort(self._rng.choice(len(admissible), size=self.max_actions, replace=False))
            self._slots = [admissible[i] for i in kept]
        else:
            self._slots = admissible
        info["dropped_actions"] = len(admissible) - len(self._slots)
        encoded = self.encoder.encode([observation, *self._slots])
        actions = np.zeros((self.max_actions, encoded.shape[1]), dtype=np.float32)
        actions[: len(self._slots)] = encoded[1:]
        return {
            "state": encoded[0].astype(np.float32, copy=False),
            "actions": actions,
            "action_mask": self.action_masks().astype(np.int8),
        }
