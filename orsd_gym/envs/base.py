"""The text-env contract every orsd-gym environment follows.

`TextEnv` owns the parts of the contract that are the same for every env, so a concrete env
only says what its tasks are, how a task starts and how one action plays out:

* spaces are `UnicodeText` (any text without control characters but newlines and tabs);
* ``reset(seed=s)`` picks the task from the seed alone; ``reset(options={"task_id": k})``
  picks task k of `tasks` (stable order);
* ``step(action)`` accepts any string: non-strings and over-long strings become a defined
  outcome (invalid action / truncated text), never an exception;
* every ``info`` carries ``task``, ``task_id``, ``task_key``, ``won``, ``is_valid_action`` and
  ``admissible_actions``;
* an env says how its tasks divide into training and held-out evaluation tasks
  (`TextEnv.task_splits`) and names each task (`TextEnv.task_key`), so a trainer can prove
  that it never evaluates on a task it trained on.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Literal

import gymnasium as gym

from orsd_gym.envs.presentation import DefaultPresentation
from orsd_gym.envs.spaces import UnicodeText, drop_non_text_characters
from orsd_gym.errors import EnvContractError, OrsdGymError, TaskSelectionError

MAX_OBSERVATION_CHARS = 32_768
MAX_ACTION_CHARS = 2_048


#: Info key an env sets (True) on a step whose observation states the episode's outcome (a
#: score, "you won") although the episode goes on; rubric writers and verifiers never read it.
#: The observation after the step that terminated an episode is hidden from them anyway.
REVEALS_OUTCOME = "reveals_outcome"


#: An env's ``expert`` argument: False (no expert), True (the expert's remaining plan in every
#: info, replanned each step) or "reset" (the plan in the reset info only: one planning call
#: per episode, for code that needs the plan at the task's start, such as expert rubrics).
ExpertMode = bool | Literal["reset"]
EXPERT_MODES = (False, True, "reset")
EXPERT_ACTIONS = "expert_actions"

#: Info key every `TextEnv` step sets: True when the action repeats the previous step's action
#: (surrounding whitespace aside) and the observation is unchanged by it, so the step could not
#: have made progress (a reward may penalise it: `RewardConfig.no_progress_penalty`); False on a
#: step the env does not play (after the episode ended, a non-text action).
NO_PROGRESS = "no_progress"


def check_expert_mode(expert: Any) -> ExpertMode:
    """``expert`` as given when it is one of `EXPERT_MODES`; raises ValueError otherwise."""
    if isinstance(expert, bool) or expert == "reset":
        return expert
    raise ValueError(f"expert={expert!r}; choose False, True (plan in every info) or 'reset' (plan at reset only)")


@dataclass(frozen=True)
class TaskSplits:
    """Which constructor arguments select an env's training tasks and which its held-out ones.

    The two sides are disjoint by construction (different games, goals or task ids), so
    evaluating on ``held_out`` never measures a task that training on ``train`` saw.
    """

    #: Overrides of the configured constructor arguments that give the training tasks.
    train: dict[str, Any]
    #: Overrides that give the held-out evaluation tasks.
    held_out: dict[str, Any]
    #: One line for reports: how the two sides differ.
    description: str


@dataclass
class StepOutcome:
    """What one action did, as a concrete env reports it to `TextEnv.step`."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    won: bool = False
    is_valid_action: bool = True
    info: dict[str, Any] = field(default_factory=dict)


class TextEnv(DefaultPresentation, gym.Env[str, str], ABC):
    """Base class for multi-turn text environments.

    Subclasses implement `tasks`, `_task_text`, `_start_task` and `_play`; they may set
    `admissible_actions()` when they know the legal actions, and say how they are presented
    (`orsd_gym.envs.presentation`): ``prompt`` (an `EnvPrompt`), ``rubric_examples`` (worked
    examples for ORSD's rubric writer) and `expert_criteria` (their expert's plan as criteria).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    #: Feedback for an action that is not a string at all.
    non_text_action_feedback = "Nothing happens."
    #: Feedback for any action sent after the episode terminated.
    finished_feedback = "The episode is over. Call reset() to start a new one."

    def __init__(self, render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode={render_mode!r}; choose one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        self._task_id: int | None = None
        self._last_observation = ""
        self._won = False
        self._done = False
        self._previous_action: str | None = None

    # ------------------------------------------------------------------ what subclasses provide
    @property
    @abstractmethod
    def tasks(self) -> Sequence[Any]:
        """The env's task list, in a stable order; ``len(tasks)`` is the number of tasks."""

    @abstractmethod
    def _task_text(self, task_id: int) -> str:
        """The goal text of task ``task_id`` (goes to ``info["task"]``)."""

    @abstractmethod
    def _start_task(self, task_id: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Start task ``task_id``; return the first observation and extra info."""

    @abstractmethod
    def _play(self, action: str) -> StepOutcome:
        """Apply one (already length-limited) action string to the running episode."""

    def admissible_actions(self) -> list[str]:
        """Legal actions in the current state, where the env knows them (else an empty list)."""
        return []

    @classmethod
    def task_splits(cls, kwargs: Mapping[str, Any]) -> TaskSplits | None:
        """The training and held-out sides of this env's tasks, given configured constructor
        arguments ``kwargs``; raises `TaskSplitError` when ``kwargs`` name a held-out side as
        training data.

        None (the default) means the env declares no partition: a trainer then holds out task
        ids itself and says so in its report. Override it when the env has a natural split
        (official train/test data, separate generator streams).
        """
        return None

    def data_warning(self) -> str | None:
        """A caveat about the data this instance plays (e.g. a generated stand-in for a missing
        dataset) that a run must state in its log and records; None when there is none."""
        return None

    def task_key(self, task_id: int) -> str:
        """A name of task ``task_id`` that is the same in every instance and split holding that
        task (a game file, a goal index), so overlap between task sets can be checked by name."""
        return f"task-{task_id}"

    # ------------------------------------------------------------------ the contract
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        n_tasks = len(self.tasks)
        if n_tasks == 0:
            raise TaskSelectionError(f"{type(self).__name__} has no tasks to play; check its data source.")
        if "task_id" in options and options["task_id"] is not None:
            task_id = options.pop("task_id")
            if isinstance(task_id, bool) or not isinstance(task_id, int) or not 0 <= task_id < n_tasks:
                raise TaskSelectionError(f"options['task_id']={task_id!r} is not a task index in [0, {n_tasks}).")
        else:
            task_id = int(self.np_random.integers(n_tasks))
        self._task_id = task_id
        self._won = False
        self._done = False
        self._previous_action = None
        try:
            started = self._start_task(task_id, options)
        except OrsdGymError:
            raise
        except Exception as error:
            raise self._broken(f"_start_task raised {type(error).__name__}: {error}", action=None) from error
        if not (isinstance(started, tuple) and len(started) == 2 and isinstance(started[1], Mapping)):
            raise self._broken(f"_start_task returned {_shown(started)}, not (observation, info)", action=None)
        observation, extra = started
        self._last_observation = self._fit_observation(self._checked_text(observation, action=None))
        return self._last_observation, self._info(extra, is_valid_action=True)

    def step(self, action: Any):
        if self._task_id is None:
            raise gym.error.ResetNeeded("Call reset() before step().")
        if self._done:
            return self._refused(self.finished_feedback)
        if not isinstance(action, str):
            return self._refused(self.non_text_action_feedback)
        action = action[:MAX_ACTION_CHARS]
        try:
            outcome = self._play(action)
        except OrsdGymError:
            raise
        except Exception as error:
            raise self._broken(f"_play raised {type(error).__name__}: {error}", action=action) from error
        if not isinstance(outcome, StepOutcome):
            raise self._broken(f"_play returned {_shown(outcome)}, not a StepOutcome", action=action)
        observation = self._checked_text(outcome.observation, action=action)
        if (
            isinstance(outcome.reward, bool)
            or not isinstance(outcome.reward, Real)
            or not math.isfinite(outcome.reward)
        ):
            raise self._broken(f"_play's reward is {_shown(outcome.reward)}, not a finite number", action=action)
        if not isinstance(outcome.info, Mapping):
            raise self._broken(f"_play's info is {_shown(outcome.info)}, not a dict", action=action)
        self._won = self._won or bool(outcome.won)
        self._done = bool(outcome.terminated)
        observation = self._fit_observation(observation)
        repeated = action.strip() == self._previous_action and observation == self._last_observation
        self._previous_action, self._last_observation = action.strip(), observation
        info = self._info({**outcome.info, NO_PROGRESS: repeated}, is_valid_action=outcome.is_valid_action)
        return self._last_observation, float(outcome.reward), bool(outcome.terminated), False, info

    def _refused(self, feedback: str):
        """A step that plays nothing (the episode is over, or the action is not text): the last
        observation again, no reward, and ``feedback`` saying why."""
        info = self._info({"feedback": feedback, NO_PROGRESS: False}, is_valid_action=False)
        return self._last_observation, 0.0, self._done, False, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        if self.render_mode == "human":
            print(self._last_observation)
        return None

    # ------------------------------------------------------------------ helpers
    @property
    def task_id(self) -> int | None:
        """Index of the running task in `tasks` (None before the first reset)."""
        return self._task_id

    def _checked_text(self, observation: Any, *, action: str | None) -> str:
        if not isinstance(observation, str):
            raise self._broken(f"its observation is {_shown(observation)}, not a string", action=action)
        return observation

    def _broken(self, what: str, *, action: str | None) -> EnvContractError:
        """The contract error of this env's running task (and the action that broke it)."""
        task = (
            self.task_key(self._task_id)
            if self._task_id is not None and 0 <= self._task_id < len(self.tasks)
            else self._task_id
        )
        step = "at reset" if action is None else f"after action {action[:200]!r}"
        return EnvContractError(f"{type(self).__name__} (task {task}) {step}: {what}")

    def _fit_observation(self, text: str) -> str:
        # Keep the observation a member of observation_space: cap its length and drop control
        # characters an engine may emit (e.g. ANSI escapes), keeping newlines and tabs.
        return drop_non_text_characters(text[:MAX_OBSERVATION_CHARS])

    def _info(self, extra: dict[str, Any], *, is_valid_action: bool) -> dict[str, Any]:
        assert self._task_id is not None
        info = dict(extra)
        info["task"] = self._task_text(self._task_id)
        info["task_id"] = self._task_id
        # The task's name across splits and instances (a user-given task outside `tasks` has none).
        info["task_key"] = self.task_key(self._task_id) if 0 <= self._task_id < len(self.tasks) else "custom"
        info["won"] = self._won
        info["is_valid_action"] = bool(is_valid_action)
        info.setdefault("admissible_actions", [] if self._done else self.admissible_actions())
        return info


def _shown(value: Any) -> str:
    """A value's type and a short repr, for contract errors."""
    text = repr(value)
    return f"{type(value).__name__} {text[:80] + '...' if len(text) > 80 else text}"
