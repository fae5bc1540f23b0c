"""Classic-RL baselines on the text envs: stable-baselines3 with DRRN-style policies, and random.

Needs the ``sb3`` extra (``pip install "orsd-gym[sb3]"``). `train_baseline` trains one algorithm
(`maskable_ppo`, `ppo`, `dqn`, `random`) on given training tasks and returns a held-out
learning curve against environment steps; `make_choice_env` gives an env SB3 can train on.
"""

import importlib.util

_MISSING = [name for name in ("stable_baselines3", "sb3_contrib") if importlib.util.find_spec(name) is None]
if _MISSING:
    raise ImportError(f'orsd_gym.baselines needs {" and ".join(_MISSING)}: pip install "orsd-gym[sb3]"')

from orsd_gym.baselines.algorithms import ALGORITHMS, SB3_ALGORITHMS, MaskedDQN, RandomAdmissibleAgent  # noqa: E402  (after the guard)
from orsd_gym.baselines.envs import make_choice_env  # noqa: E402  (after the guard)
from orsd_gym.baselines.evaluation import EpisodeStats, EvalPoint, evaluate, play_episode  # noqa: E402  (after the guard)
from orsd_gym.baselines.policies import DRRNActorCriticPolicy, DRRNFeatures, DRRNQPolicy, MaskableDRRNPolicy  # noqa: E402  (after the guard)
from orsd_gym.baselines.train import BaselineConfig, BaselineResult, load_baseline, train_baseline  # noqa: E402  (after the guard)

__all__ = [
    "BaselineConfig",
    "ALGORITHMS",
    "SB3_ALGORITHMS",
    "BaselineResult",
    "DRRNActorCriticPolicy",
    "DRRNFeatures",
    "DRRNQPolicy",
    "EpisodeStats",
    "EvalPoint",
    "MaskableDRRNPolicy",
    "MaskedDQN",
    "RandomAdmissibleAgent",
    "evaluate",
    "load_baseline",
    "make_choice_env",
    "play_episode",
    "train_baseline",
]
