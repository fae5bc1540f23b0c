"""``orsd_gym/WebShop-v0``: WebShop as a text Gymnasium env (see the package docstring)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from orsd_gym.envs.base import (
    EXPERT_ACTIONS,
    ExpertMode,
    StepOutcome,
    TaskSplits,
    TextEnv,
    check_expert_mode,
)
from orsd_gym.envs.webshop.data import Catalog, build_catalog, load_catalog, resolve_data_dir
from orsd_gym.envs.webshop.expert import WebShopExpert
from orsd_gym.envs.webshop.goals import SPLITS, TEST_GOALS, build_goals, split_goals, validate_goal
from orsd_gym.envs.webshop.pages import OBSERVATION_MODES
from orsd_gym.envs.webshop.presentation import WebShopPresentation
from orsd_gym.envs.webshop.reward import DEFAULT_OPTION_MATCHING, OPTION_MATCHING, check_pos_tagger
from orsd_gym.envs.webshop.search import ProductSearchEngine
from orsd_gym.envs.webshop.shop import ShopSession
from orsd_gym.envs.webshop.synthetic import DEFAULT_SYNTHETIC_PRODUCTS, SOURCE_LABEL, synthetic_catalog_data
from orsd_gym.errors import GoalError, TaskSelectionError, TaskSplitError

#: ``info["task_id"]`` of an episode started with ``options={"goal": {...}}`` (not in `tasks`).
CUSTOM_GOAL_ID = -1


@dataclass(frozen=True)
class ShopData:
    """Everything shared by all episodes (and env copies) on one catalog: read-only."""

    catalog: Catalog
    engine: ProductSearchEngine
    goals: tuple[dict[str, Any], ...]  # all goals, in the benchmark's shuffled order


@lru_cache(maxsize=4)
def load_shop_data(
    data_dir: str | None, catalog_size: str, catalog_seed: int, human_goals: bool, synthetic_products: int
) -> ShopData:
    """Load (once per process and arguments) a catalog, its search index and its goals.

    ``data_dir=None`` means the embedded synthetic catalog. Env copies in one process (sync
    vector envs, tests) share the result, so it must never be mutated.
    """
    if data_dir is None:
        if human_goals:
            raise GoalError("human_goals=True needs the official data (items_human_ins.json); pass data_dir")
        raws, attributes = synthetic_catalog_data(synthetic_products, seed=catalog_seed)
        catalog = build_catalog(raws, attributes, seed=catalog_seed, source=f"{SOURCE_LABEL}, seed {catalog_seed}")
    else:
        catalog = load_catalog(data_dir, size=catalog_size, seed=catalog_seed, human_goals=human_goals)
    goals = build_goals(catalog, human=human_goals, seed=catalog_seed)
    return ShopData(catalog, ProductSearchEngine(catalog.products), tuple(goals))


class WebShopEnv(WebShopPresentation, TextEnv):
    """WebShop: find and buy the product an instruction describes.

    Args:
        data_dir: folder with the official files (default ``$WEBSHOP_DATA``; neither: the
            embedded synthetic catalog, labelled as such in ``env.unwrapped.data_source``).
        observation_mode: ``"text"`` (strings joined by " [SEP] ") or ``"text_rich"``.
        goal_split: ``"test"`` (first 500 goals), ``"train"`` (the rest) or ``"all"``.
        human_goals: use the human instructions of items_human_ins.json instead of the
            synthetic goals.
        catalog_size: ``"small"`` (1000 products), ``"full"`` (1.18M) or ``"auto"`` (small if present).
        catalog_seed: drives ranged prices and goal price bounds (goal lists are reproducible).
        synthetic_products: size of the embedded synthetic catalog.
        option_matching: how the purchase reward compares goal options with the chosen values:
            ``"pairs"`` (the benchmark's reward: each goal option as its (name, value) pair, so
            e.g. colour "black2070" is not matched by the chosen "black2070") or ``"values"``
            (the goal's values alone). ``info["reward_details"]["option_matching"]`` says which.
        expert: True puts the privileged expert's remaining path to the goal product in
            ``info["expert_actions"]`` (replanned from the current page every step; see
            `orsd_gym.envs.webshop.expert`), "reset" only in the reset info, False nowhere.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        observation_mode: str = "text",
        goal_split: str = "test",
        human_goals: bool = False,
        catalog_size: str = "auto",
        catalog_seed: int = 0,
        synthetic_products: int = DEFAULT_SYNTHETIC_PRODUCTS,
        option_matching: str = DEFAULT_OPTION_MATCHING,
        expert: ExpertMode = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(render_mode=render_mode)
        if observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode={observation_mode!r}; choose one of {OBSERVATION_MODES}")
        if goal_split not in SPLITS:
            raise ValueError(f"goal_split={goal_split!r}; choose one of {SPLITS}")
        if option_matching not in OPTION_MATCHING:
            raise ValueError(f"option_matching={option_matching!r}; choose one of {OPTION_MATCHING}")
        if isinstance(catalog_seed, bool) or not isinstance(catalog_seed, int):
            raise ValueError(f"catalog_seed must be an int, got {catalog_seed!r}")
        check_pos_tagger()
        resolved = resolve_data_dir(data_dir)
        self.observation_mode = observation_mode
        self.goal_split = goal_split
        self.human_goals = bool(human_goals)
        self.option_matching = option_matching
        self.expert = check_expert_mode(expert)
        self.shop_data = load_shop_data(
            None if resolved is None else str(resolved.resolve()),
            catalog_size,
            catalog_seed,
            bool(human_goals),
            synthetic_products,
        )
        self._goals = split_goals(self.shop_data.goals, goal_split)
        self._session: ShopSession | None = None
        self._expert: WebShopExpert | None = None
        self._custom_goal: dict[str, Any] | None = None

    # ------------------------------------------------------------------ data views
    @property
    def goals(self) -> list[dict[str, Any]]:
        """The goal list of the split (the same objects as `tasks`)."""
        return self._goals

    @property
    def tasks(self) -> Sequence[dict[str, Any]]:
        return self._goals

    @property
    def catalog(self) -> Catalog:
        return self.shop_data.catalog

    @property
    def data_source(self) -> str:
        return self.shop_data.catalog.source

    def data_warning(self) -> str | None:
        if self.shop_data.catalog.source.startswith(SOURCE_LABEL):
            return (
                f"WebShop is running on the {self.shop_data.catalog.source}: no data_dir was given and "
                "$WEBSHOP_DATA is not set, so scores are not comparable with published WebShop results"
            )
        return None

    @property
    def session(self) -> ShopSession:
        if self._session is None:
            raise RuntimeError("Call reset() before using the session.")
        return self._session

    @classmethod
    def task_splits(cls, kwargs: Mapping[str, Any]) -> TaskSplits:
        # The env's own default split is "test" (for evaluation); a trainer trains on "train".
        split = kwargs.get("goal_split", "train")
        if split not in SPLITS:
            raise GoalError(f"goal_split={split!r}; choose one of {SPLITS}")
        if split != "train":
            raise TaskSplitError(f"WebShop goal_split={split!r} holds held-out goals; train on goal_split='train'")
        return TaskSplits(
            train={"goal_split": "train"},
            held_out={"goal_split": "test"},
            description=f"goals: training on goals {TEST_GOALS} onwards, evaluation on the first {TEST_GOALS}",
        )

    def task_key(self, task_id: int) -> str:
        # Goals are named by their index in the whole shuffled goal list, whatever the split.
        offset = TEST_GOALS if self.goal_split == "train" else 0
        return f"{'human' if self.human_goals else 'synthetic'}-goal-{offset + task_id}"

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """``options``: ``{"task_id": k}`` or ``{"goal_index": k}`` (goal k of the split), or
        ``{"goal": {...}}`` (a goal dict in WebShop's format; ``info["task_id"]`` is then -1)."""
        options = dict(options or {})
        if "goal_index" in options:
            if "task_id" in options:
                raise TaskSelectionError("pass either options['goal_index'] or options['task_id'], not both")
            options["task_id"] = options.pop("goal_index")
        goal = options.pop("goal", None)
        if goal is None:
            self._custom_goal = None
            return super().reset(seed=seed, options=options)
        # A given goal bypasses task selection; the seed still seeds np_random.
        self._custom_goal = validate_goal(goal)
        super(TextEnv, self).reset(seed=seed)
        self._task_id, self._won, self._done = CUSTOM_GOAL_ID, False, False
        observation, extra = self._start_goal(self._custom_goal)
        self._last_observation = self._fit_observation(observation)
        return self._last_observation, self._info(extra, is_valid_action=True)

    def _current_goal(self, task_id: int) -> dict[str, Any]:
        if task_id == CUSTOM_GOAL_ID and self._custom_goal is not None:
            return self._custom_goal
        return self._goals[task_id]

    def _task_text(self, task_id: int) -> str:
        return self._current_goal(task_id)["instruction_text"]

    def _start_task(self, task_id: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return self._start_goal(self._goals[task_id])

    def _start_goal(self, goal: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._session = ShopSession(self.shop_data.catalog, self.shop_data.engine, goal, self.option_matching)
        info = self._page_info(score=0.0)
        if self.expert:
            self._expert = WebShopExpert(self.shop_data.engine, goal)
            info[EXPERT_ACTIONS] = self._expert.plan(self._session)
        return self._session.observation(self.observation_mode), info

    # ------------------------------------------------------------------ steps
    def admissible_actions(self) -> list[str]:
        return [] if self._session is None else self._session.admissible_actions()

    def _page_info(self, score: float) -> dict[str, Any]:
        return {"available_actions": self.session.available_actions(), "score": score}

    def _play(self, action: str) -> StepOutcome:
        result = self.session.act(action)
        info = self._page_info(score=result.reward)
        if result.feedback:
            info["feedback"] = result.feedback
        if result.done:
            info["reward_details"] = result.details
        if self.expert is True:
            assert self._expert is not None
            info[EXPERT_ACTIONS] = self._expert.plan(self.session)
        # Invalid actions leave the page (and so the observation) as it was, as in the benchmark.
        return StepOutcome(
            observation=self.session.observation(self.observation_mode),
            reward=result.reward,
            terminated=result.done,
            won=result.done and result.reward == 1.0,
            is_valid_action=result.valid,
            info=info,
        )
