"""reasoning-gym datasets as orsd-gym envs (``pip install 'orsd-gym[reasoning-gym]'``).

``gym.make("orsd_gym/ReasoningGym-v0", dataset="chain_sum")``: each episode is one question of
the dataset; the action is the answer (the content of an ``<answer>...</answer>`` tag where
the action has one, reasoning-gym's own convention, else the whole action), scored by the
dataset's own ``score_answer``. That score is the reward, the episode ends with it, and it is
won at 1.0. The datasets are procedural: nothing is downloaded.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from orsd_gym.envs.adapters.common import check_split, content_key, content_splits, distinct_on_side, require
from orsd_gym.envs.base import StepOutcome, TaskSplits, TextEnv
from orsd_gym.envs.presentation import EnvPrompt

EXTRA = "reasoning-gym"
#: reasoning-gym's own default dataset size: the candidate questions a split is taken from.
DEFAULT_SIZE = 500


def dataset_names() -> list[str]:
    """Every dataset the installed reasoning-gym registers."""
    return sorted(require("reasoning_gym", EXTRA).factory.DATASETS)


@functools.lru_cache(maxsize=8)
def _generated(dataset: str, seed: int, size: int, config_json: str) -> tuple[Any, tuple[dict, ...], tuple[str, ...]]:
    """The dataset object, its ``size`` entries and their content keys, generated once per process
    (some generators take seconds; every env copy of a rollout shares them, read-only)."""
    reasoning_gym = require("reasoning_gym", EXTRA)
    names = dataset_names()
    if dataset not in names:
        raise ValueError(f"dataset={dataset!r} is not a reasoning-gym dataset; choose one of: {', '.join(names)}")
    config = json.loads(config_json)
    try:
        source = reasoning_gym.create_dataset(dataset, seed=seed, size=size, **config)
    except TypeError as error:  # an unknown config field
        raise ValueError(f"config={config!r} does not fit reasoning-gym's {dataset!r} dataset: {error}") from error
    entries = tuple(source[index] for index in range(size))
    return source, entries, tuple(content_key(entry["question"]) for entry in entries)


class ReasoningGymEnv(TextEnv):
    """One reasoning-gym question per episode (see the module docstring).

    ``size`` questions are drawn from ``seed`` (``config``: the dataset's own settings, such as
    ``{"min_terms": 2}``); a question drawn twice is one task, and ``split`` keeps the held-out
    ones (``"eval"``: content hash 0 mod 5), the others (``"train"``) or all.
    """

    prompt = EnvPrompt(
        "You are solving a reasoning problem. Work it out, then send your final answer as your action, "
        "written exactly as the question asks and with nothing else.",
        show_admissible=False,
        noop_action="",
    )

    def __init__(
        self,
        dataset: str | None = None,
        split: str = "all",
        size: int = DEFAULT_SIZE,
        seed: int = 0,
        config: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if dataset is None:
            raise ValueError(f"ReasoningGym-v0 needs dataset=NAME; reasoning-gym has: {', '.join(dataset_names())}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int, got {size!r}")
        self.dataset = dataset
        self.split = check_split(split)
        self._source, entries, keys = _generated(dataset, seed, size, json.dumps(dict(config or {}), sort_keys=True))
        chosen = distinct_on_side(keys, self.split)
        self._entries = [entries[index] for index in chosen]
        self._keys = [keys[index] for index in chosen]

    @property
    def tasks(self) -> Sequence[dict]:
        return self._entries

    @classmethod
    def task_splits(cls, kwargs: Mapping[str, Any]) -> TaskSplits:
        return content_splits(kwargs, "ReasoningGym")

    def task_key(self, task_id: int) -> str:
        return f"{self.dataset}/{self._keys[task_id]}"

    def _task_text(self, task_id: int) -> str:
        return self._entries[task_id]["question"]

    def _start_task(self, task_id: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return self._task_text(task_id), {"task_type": self.dataset}

    def answer_of(self, action: str) -> str:
        """The answer an action gives: its last ``<answer>`` tag's content, else the whole action."""
        tagged = require("reasoning_gym", EXTRA).utils.extract_answer(action)
        return action.strip() if tagged is None else tagged

    def _play(self, action: str) -> StepOutcome:
        answer = self.answer_of(action)
        score = float(self._source.score_answer(answer, self._entries[self.task_id]))
        return StepOutcome(
            f"Your answer scored {score:g} of 1.",
            reward=score,
            terminated=True,
            won=score >= 1.0,
            info={"score": score, "answer": answer},
        )
