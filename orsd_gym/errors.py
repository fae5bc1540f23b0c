"""Every error type of the package, in one leaf module that any layer may import.

Each is a `OrsdGymError` (so a command can report any of them as one line) and also the
built-in exception its meaning matches (``ValueError`` for a bad value, ``FileNotFoundError``
for missing data, ...), so ``except ValueError`` keeps working for callers that prefer it.
"""

from __future__ import annotations


class OrsdGymError(Exception):
    """Base class of the errors this package raises on purpose (bad input, missing data)."""


# --------------------------------------------------------------------------- configuration and command line


class ConfigError(OrsdGymError, ValueError):
    """A config key or value is invalid; the message names the key."""


class UnknownEnvError(ConfigError):
    """An env id that is not registered, or whose module or entry point does not load."""


class TaskPlanError(ConfigError):
    """The config cannot give a sound plan (eval overlapping training, too few held-out tasks)."""


class MemoryBudgetError(ConfigError):
    """``optim.max_memory_gb`` leaves no room for an update's activations."""


class PluginError(OrsdGymError, ImportError):
    """A plugin (a config's ``plugins`` or an installed ``orsd_gym.plugins`` entry point) is
    missing or fails to import; the message names it and the cause."""


class UsageError(OrsdGymError):
    """A command was called wrongly: printed as one line, exit status 2."""


class DiskWriteError(OrsdGymError, OSError):
    """A write found no room or no permission (a full disk, a file-size limit, a read-only or
    forbidden directory). Its one line names the file, what was being written, why, what is
    intact and what to do: ``remedy`` (free space, ...), then ``next_step``. A layer that knows
    more fills these on the way up: the trainer its last good checkpoint (``intact``), a command
    how to continue (``next_step``)."""

    def __init__(self, path: str, what: str, reason: str, remedy: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.path, self.what, self.reason, self.remedy = path, what, reason, remedy
        self.intact = ""
        self.next_step = "run the same command again"

    def __reduce__(self):  # pickled whole (a data-parallel worker's error reaches the launcher)
        return type(self), (self.path, self.what, self.reason, self.remedy), self.__dict__

    def __str__(self) -> str:
        parts = [f"could not write {self.what} to {self.path}: {self.reason}", self.intact]
        return "; ".join(part for part in parts if part) + f"; {self.remedy}, then {self.next_step}"


# --------------------------------------------------------------------------- environments


class TaskSelectionError(OrsdGymError, ValueError):
    """A reset asked for a task that does not exist (bad ``task_id`` or empty task list)."""


class TaskSplitError(OrsdGymError, ValueError):
    """Constructor arguments that would train on an env's held-out evaluation tasks."""


class UnknownSplitError(OrsdGymError, ValueError):
    """An ALFWorld ``split`` name that does not exist."""


class UnknownTaskTypeError(OrsdGymError, ValueError):
    """A ``task_types`` argument named a type that ALFWorld does not have."""


class UnknownWordingError(OrsdGymError, ValueError):
    """``wording`` is neither "2.1.1" nor "wheel"."""


class GenerationError(OrsdGymError, RuntimeError):
    """No valid task could be drawn for a config (e.g. knobs that no floor plan satisfies)."""


class EngineError(OrsdGymError, RuntimeError):
    """The engine could not load or play a game file."""


class ALFWorldDataNotFoundError(OrsdGymError, FileNotFoundError):
    """No official ALFWorld games where they were looked for."""


class WebShopDataError(OrsdGymError, ValueError):
    """The WebShop data is missing, incomplete or not in the official format."""


class GoalError(OrsdGymError, ValueError):
    """A goal dict is not in WebShop's goal format, or a split name is unknown."""


class JSONStreamError(OrsdGymError, ValueError):
    """A data file is not the JSON shape WebShop's files have (array / object at the top)."""


class POSTaggerUnavailable(OrsdGymError, RuntimeError):
    """No spaCy English model is installed, so title nouns cannot be tagged."""


class NoAdmissibleActionsError(OrsdGymError, ValueError):
    """An env started an episode without listing any admissible action (a choice wrapper needs them)."""


class EnvContractError(OrsdGymError, TypeError):
    """An env broke the text-env contract (a non-text observation, a reset or step that raised);
    the message names the env, the task and the action."""


class EnvWorkerError(OrsdGymError, RuntimeError):
    """A remote env worker (a Ray actor) kept dying, so its episode could not be finished."""


class EnvReplayError(EnvWorkerError):
    """A lost env's episode, replayed on a new one from its reset seed and actions, came out
    differently: the env is not deterministic given its seed and actions, so it cannot be replayed."""


# --------------------------------------------------------------------------- policies and rollouts


class ModelNotFoundError(OrsdGymError, FileNotFoundError):
    """A model name resolved to nothing loadable; the message says what was tried and how to fix it."""


class ContextTooLongError(OrsdGymError, ValueError):
    """A context plus its generation budget does not fit the model's positions."""


class ChatTemplateError(OrsdGymError, ValueError):
    """The tokenizer's chat template cannot be used for multi-turn episodes."""


# --------------------------------------------------------------------------- algorithms


class UnknownAlgorithmError(OrsdGymError, KeyError):
    """`make_algorithm` was asked for a name that is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class MissingExpertPlanError(OrsdGymError, ValueError):
    """A trajectory's reset info has no ``expert_actions``: the env was made without an expert."""


class AlignmentLayoutError(OrsdGymError, ValueError):
    """A trajectory's model spans cannot be matched with its actions, or a delta with its tokens."""


class ReplayError(OrsdGymError, RuntimeError):
    """A trajectory's prompt span cannot be reproduced from its prompt messages."""


class VerifierError(OrsdGymError, RuntimeError):
    """The verifier model cannot answer yes/no questions as configured."""


# --------------------------------------------------------------------------- training runs


class RunDirectoryError(OrsdGymError, RuntimeError):
    """A run directory cannot be used as asked (a run already there, nothing to resume, other settings)."""


class CheckpointError(OrsdGymError, RuntimeError):
    """No usable checkpoint where one was required."""


class RayUnavailableError(OrsdGymError, ImportError):
    """Ray is needed (data-parallel workers, env actors) but not installed."""


class ClusterResourcesError(OrsdGymError, RuntimeError):
    """The Ray cluster has too few CPUs or GPUs for the workers or env actors asked for."""


class AuditNotFoundError(OrsdGymError, FileNotFoundError):
    """The run directory has no audit for the requested iteration or trajectory."""
