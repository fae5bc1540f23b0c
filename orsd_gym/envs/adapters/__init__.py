"""Other libraries' environments on the orsd-gym contract, each behind an optional extra.

* `reasoning_gym_env.ReasoningGymEnv` (``orsd_gym/ReasoningGym-v0``, ``dataset=NAME``): a
  reasoning-gym dataset, one question per episode, scored by the dataset's own ``score_answer``.
* `textarena_env.TextArenaEnv` (``orsd_gym/TextArena-v0``, ``game=ID``): a single-player
  TextArena game, played move by move, scored by the game's own outcome.

Importing this package imports neither library: each is imported when its env is made, and a
missing one is an `AdapterUnavailableError` that names the extra to install.
"""

from orsd_gym.envs.adapters.common import AdapterUnavailableError, adapter_description

__all__ = ["AdapterUnavailableError", "adapter_description"]
