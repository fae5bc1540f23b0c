"""ALFWorld on its real engine (TextWorld PDDL + Fast Downward): official json_2.1.1 games or
procedurally generated tasks. Importing this package does not import textworld."""

from orsd_gym.envs.alfworld.generator import GenerationError, GeneratorConfig
from orsd_gym.envs.alfworld.official import ALFWorldDataNotFoundError
from orsd_gym.envs.alfworld.tasks import TASK_TYPES, ALFWorldTask, UnknownTaskTypeError

__all__ = [
    "TASK_TYPES",
    "ALFWorldDataNotFoundError",
    "ALFWorldTask",
    "GenerationError",
    "GeneratorConfig",
    "UnknownTaskTypeError",
]
