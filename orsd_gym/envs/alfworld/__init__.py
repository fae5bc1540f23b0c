"""ALFWorld on its real engine (TextWorld PDDL + Fast Downward): official json_2.1.1 games or
procedurally generated tasks. Importing this package does not import textworld."""

from orsd_gym.envs.alfworld.generator import GeneratorConfig
from orsd_gym.envs.alfworld.tasks import TASK_TYPES, ALFWorldTask
from orsd_gym.errors import ALFWorldDataNotFoundError, GenerationError, UnknownTaskTypeError

__all__ = [
    "TASK_TYPES",
    "ALFWorldDataNotFoundError",
    "ALFWorldTask",
    "GenerationError",
    "GeneratorConfig",
    "UnknownTaskTypeError",
]
