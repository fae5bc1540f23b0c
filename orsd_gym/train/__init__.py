"""Training: configs, the task plan, the trainer, the update, evaluation, checkpoints, metrics,
and the comparison of algorithms with its report."""

from orsd_gym.train.config import Config, load_config, resolve_algo
from orsd_gym.train.plan import TaskPlan, build_task_plan, task_plan
from orsd_gym.train.trainer import Trainer
from orsd_gym.train.update import update_policy

__all__ = [
    "Config",
    "TaskPlan",
    "Trainer",
    "build_task_plan",
    "load_config",
    "resolve_algo",
    "task_plan",
    "update_policy",
]
