"""`ALFWorldEnv`: ALFWorld's text games as an orsd-gym `TextEnv`, on the real engine."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orsd_gym.envs.alfworld.engine import EngineState, PddlGameEngine
from orsd_gym.envs.alfworld.generator import GeneratorConfig
from orsd_gym.envs.alfworld.official import OFFICIAL_SPLITS, collect_official_tasks, resolve_data_dir
from orsd_gym.envs.alfworld.pool import GeneratedTaskPool
from orsd_gym.envs.alfworld.presentation import ALFWorldPresentation
from orsd_gym.envs.alfworld.tasks import ALFWorldTask, normalize_task_types
from orsd_gym.envs.alfworld.text import clean_observation
from orsd_gym.envs.alfworld.worker import RecyclingEngine
from orsd_gym.envs.base import (
    EXPERT_ACTIONS,
    ExpertMode,
    StepOutcome,
    TaskSplits,
    TextEnv,
    check_expert_mode,
)
from orsd_gym.errors import TaskSplitError, UnknownSplitError

GENERATED_SPLITS = ("generated", "generated_eval")
SPLITS = (*GENERATED_SPLITS, *OFFICIAL_SPLITS)
#: The held-out side of each split a trainer may train on.
_HELD_OUT_SPLIT = {"generated": "generated_eval", "train": "valid_seen"}


class ALFWorldEnv(ALFWorldPresentation, TextEnv):
    """ALFWorld household tasks played on TextWorld's PDDL engine (Fast Downward inside).

    Args:
        split: "generated" (procedural tasks from the wheel's data in the training floor plans,
            the default), "generated_eval" (the same generator in the held-out floor plans) or an
            official split ("train", "valid_seen", "valid_unseen") read from ``data_dir``.
        data_dir: root of the official data (default ``$ALFWORLD_DATA``).
        task_types: subset of the six task types (default all).
        expert: True puts the planner's plan from the current state in ``info["expert_actions"]``
            (the planner replans every step: for tests, debugging and behaviour cloning);
            "reset" plans once per episode and puts the plan in the reset info only (for code
            that needs the plan at the task's start, e.g. expert rubrics; a step then costs
            what it costs without an expert); False never plans.
        raw: keep the engine's text as is (welcome banner, "You arrive at loc N. ").
        generator: `GeneratorConfig` or dict of its fields (generated splits only).
        cache_dir: where generated games are cached (default ``$ORSD_GYM_CACHE`` or
            ``~/.cache/orsd_gym``).
        recycle_after: play in a child process replaced every this many new-game loads, so
            memory stays flat over long runs (the engine keeps memory per load); ``None`` plays
            in this process.
    """

    def __init__(
        self,
        split: str = "generated",
        data_dir: str | os.PathLike | None = None,
        task_types: Iterable[str] | str | None = None,
        expert: ExpertMode = False,
        raw: bool = False,
        generator: GeneratorConfig | dict[str, Any] | None = None,
        cache_dir: str | os.PathLike | None = None,
        recycle_after: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if split not in SPLITS:
            raise UnknownSplitError(f"split={split!r}; choose one of {SPLITS}")
        self.split = split
        self.task_types = normalize_task_types(task_types)
        self.expert = check_expert_mode(expert)
        self.raw = bool(raw)
        if split in GENERATED_SPLITS:
            self.generator = GeneratorConfig.from_value(generator)
            self._tasks: Sequence[ALFWorldTask] = GeneratedTaskPool(
                self.generator, self.task_types, cache_dir, held_out=split == "generated_eval"
            )
        else:
            if generator is not None:
                raise ValueError(f"generator options apply to split in {GENERATED_SPLITS} only")
            self.generator = None
            self._tasks = collect_official_tasks(resolve_data_dir(data_dir), split, self.task_types)
        if recycle_after is not None and (not isinstance(recycle_after, int) or recycle_after < 1):
            raise ValueError(f"recycle_after must be None or an int >= 1, got {recycle_after!r}")
        self.recycle_after = recycle_after
        self._engine: PddlGameEngine | RecyclingEngine | None = None
        self._state: EngineState | None = None

    # ------------------------------------------------------------------ TextEnv hooks
    @property
    def tasks(self) -> Sequence[ALFWorldTask]:
        return self._tasks

    def _task_text(self, task_id: int) -> str:
        return self._tasks[task_id].goal

    def _start_task(self, task_id: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self._engine is None:
            if self.recycle_after is None:
                self._engine = PddlGameEngine(expert=self.expert)
            else:
                self._engine = RecyclingEngine(expert=self.expert, recycle_after=self.recycle_after)
        task = self._tasks[task_id]
        self._state = self._engine.reset(task.game_file)
        return self._text(self._state.feedback), self._extra(task, with_plan=bool(self.expert))

    def _play(self, action: str) -> StepOutcome:
        assert self._engine is not None and self._task_id is not None
        self._state = self._engine.step(action)
        won = self._state.won
        return StepOutcome(
            self._text(self._state.feedback),
            reward=1.0 if won else 0.0,
            terminated=won,
            won=won,
            is_valid_action=self._state.is_valid_action,
            info=self._extra(self._tasks[self._task_id], with_plan=self.expert is True),
        )

    def admissible_actions(self) -> list[str]:
        return [] if self._state is None else list(self._state.admissible_actions)

    @classmethod
    def task_splits(cls, kwargs: Mapping[str, Any]) -> TaskSplits:
        split = kwargs.get("split", "generated")
        if split not in SPLITS:
            raise UnknownSplitError(f"split={split!r}; choose one of {SPLITS}")
        if split not in _HELD_OUT_SPLIT:
            trainable = " or ".join(repr(s) for s in _HELD_OUT_SPLIT)
            raise TaskSplitError(f"ALFWorld split={split!r} is for evaluation; train on split={trainable}")
        held_out = _HELD_OUT_SPLIT[split]
        if split == "generated":
            description = "generated tasks; held-out tasks are in floor plans no training task uses"
        else:
            description = f"official games: training on {split!r}, evaluation on {held_out!r}"
        return TaskSplits(train={"split": split}, held_out={"split": held_out}, description=description)

    def task_key(self, task_id: int) -> str:
        if isinstance(self._tasks, GeneratedTaskPool):
            return self._tasks.task_key(task_id)
        # An official game is named by its task folder and trial, which no two splits share.
        return f"json_2.1.1:{self._tasks[task_id].name}"

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if isinstance(self._tasks, GeneratedTaskPool):
            self._tasks.close()
        self._state = None
        super().close()

    # ------------------------------------------------------------------ helpers
    def _text(self, feedback: str) -> str:
        return feedback if self.raw else clean_observation(feedback)

    def _extra(self, task: ALFWorldTask, *, with_plan: bool) -> dict[str, Any]:
        assert self._state is not None
        extra: dict[str, Any] = {
            "task_type": task.task_type,
            "game_file": task.game_file,
            "admissible_actions": list(self._state.admissible_actions),
        }
        if with_plan:
            extra[EXPERT_ACTIONS] = list(self._state.expert_actions or [])
        return extra
