"""Advantage estimators and losses: GRPO, ORSD, GiGPO, behind one `Algorithm` interface and a registry.

``make_algorithm("grpo" | "orsd" | "gigpo", config)`` builds one; ``ALGORITHMS`` lists what is registered.
"""

from orsd_gym.algos.base import (
    ALGORITHMS,
    Algorithm,
    PreparedBatch,
    algorithm_config_class,
    make_algorithm,
    register_algorithm,
)
from orsd_gym.algos.gigpo import GiGPO, GiGPOConfig
from orsd_gym.algos.grpo import GRPO, GRPOConfig
from orsd_gym.algos.orsd import ORSD, ORSDConfig
from orsd_gym.algos.rewards import RewardConfig, trajectory_reward
from orsd_gym.errors import UnknownAlgorithmError

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "GRPO",
    "GRPOConfig",
    "GiGPO",
    "GiGPOConfig",
    "ORSD",
    "ORSDConfig",
    "PreparedBatch",
    "RewardConfig",
    "UnknownAlgorithmError",
    "algorithm_config_class",
    "make_algorithm",
    "register_algorithm",
    "trajectory_reward",
]
