"""One shopping session: the benchmark's page flow and action semantics, engine-free of gym.

search (start) -> results (``search[q]``, 10 per page of up to 50) -> item (``click[<asin>]``)
-> sub-page (description / features / reviews) -> done (``click[buy now]``). ``< prev`` goes
one level up (results page -> previous page), ``back to search`` to the start. Clicking an
option value selects it for its option name (the last click per name wins).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orsd_gym.envs.webshop import pages
from orsd_gym.envs.webshop.data import Catalog
from orsd_gym.envs.webshop.reward import DEFAULT_OPTION_MATCHING, purchase_reward
from orsd_gym.envs.webshop.search import SEARCH_RETURN_N, ProductSearchEngine

# The benchmark's parser: "name[argument]" (greedy, anchored at the start only).
_ACTION = re.compile(r"(.+)\[(.+)\]")
SEARCH_TEMPLATE = "search[<your query>]"


def parse_action(action: str) -> tuple[str, str | None]:
    match = _ACTION.match(action.strip())
    if match is None:
        return action.strip(), None
    return match.group(1), match.group(2)


@dataclass
class ActionResult:
    valid: bool
    reward: float = 0.0
    done: bool = False
    feedback: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionState:
    page: str = "start"  # start | results | item | subpage | done
    query: str = ""
    results: list[str] = field(default_factory=list)
    results_page: int = 1
    asin: str | None = None
    subpage: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    visited: set[str] = field(default_factory=set)
    reward: float = 0.0


class ShopSession:
    """The pages and clicks of one episode for one goal.

    ``option_matching`` is passed to `purchase_reward` ("pairs": the benchmark's reward).
    """

    def __init__(
        self,
        catalog: Catalog,
        engine: ProductSearchEngine,
        goal: Mapping[str, Any],
        option_matching: str = DEFAULT_OPTION_MATCHING,
    ) -> None:
        self.catalog = catalog
        self.engine = engine
        self.goal = goal
        self.option_matching = option_matching
        self.state = SessionState()
        self.page = self._build_page()

    @property
    def instruction(self) -> str:
        return self.goal["instruction_text"]

    # ------------------------------------------------------------------ pages
    def _build_page(self) -> pages.Page:
        s = self.state
        if s.page == "start":
            return pages.start_page(self.instruction)
        if s.page == "results":
            start = (s.results_page - 1) * pages.RESULTS_PER_PAGE
            shown = [self.catalog.by_asin[a] for a in s.results[start : start + pages.RESULTS_PER_PAGE]]
            return pages.results_page(self.instruction, shown, len(s.results), s.results_page, s.visited)
        product = self.catalog.by_asin[s.asin]
        if s.page == "item":
            return pages.item_page(self.instruction, product, s.options, s.query)
        if s.page == "subpage":
            return pages.sub_page(self.instruction, product, s.subpage)
        return pages.done_page(s.asin, s.options, s.reward)

    def available_actions(self) -> dict[str, Any]:
        return {"has_search_bar": self.page.has_search_bar, "clickables": list(self.page.clickables)}

    def admissible_actions(self) -> list[str]:
        actions = [SEARCH_TEMPLATE] if self.page.has_search_bar else []
        return actions + [f"click[{name}]" for name, target in self.page.clickables.items() if target is not None]

    def observation(self, mode: str) -> str:
        return self.page.render(mode)

    # ------------------------------------------------------------------ actions
    def act(self, action: str) -> ActionResult:
        if self.state.page == "done":
            return ActionResult(False, feedback="The purchase is done.")
        name, argument = parse_action(action)
        if argument is not None:
            argument = argument.lower()
        if name == "search" and argument and argument.strip():
            if not self.page.has_search_bar:
                return ActionResult(False, feedback="There is no search bar on this page; click[back to search] first.")
            self._search(argument)
            return ActionResult(True)
        if name == "click" and argument is not None:
            if argument not in self.page.clickables:
                return ActionResult(False, feedback=f"'{argument}' is not clickable on this page.")
            target = self.page.clickables[argument]
            if target is None:
                return ActionResult(False, feedback=f"Clicking '{argument}' does nothing; use {SEARCH_TEMPLATE}.")
            return self._click(target)
        return ActionResult(False, feedback="Invalid action: use search[<keywords>] or click[<clickable>].")

    def _search(self, keywords: str) -> None:
        s = self.state
        s.query = keywords
        s.results = self.engine.search(keywords, k=SEARCH_RETURN_N)
        s.results_page = 1
        s.page = "results"
        self.page = self._build_page()

    def _click(self, target: pages.Target) -> ActionResult:
        s = self.state
        kind = target[0]
        result = ActionResult(True)
        if kind == "start":
            s.page, s.asin, s.subpage, s.options = "start", None, None, {}
        elif kind == "results":
            s.page, s.results_page = "results", target[1]
        elif kind == "item":
            s.page, s.asin, s.subpage, s.options = "item", target[1], None, {}
            s.visited.add(target[1])
        elif kind == "subpage":
            s.page, s.subpage = "subpage", target[1]
        elif kind == "option":
            s.options[target[1]] = target[2]
        elif kind == "prev":
            # From a sub-page back to its item (choices kept); from an item to its results page.
            s.page = "item" if s.page == "subpage" else "results"
            s.subpage = None
        elif kind == "buy":
            result = self._buy()
        else:
            raise AssertionError(f"unknown click target {target!r}")
        self.page = self._build_page()
        return result

    def _buy(self) -> ActionResult:
        s = self.state
        product = self.catalog.by_asin[s.asin]
        reward, details = purchase_reward(
            product, self.goal, self.catalog.prices[s.asin], s.options, self.option_matching
        )
        s.page, s.reward = "done", reward
        details = {
            **details,
            "purchased_asin": s.asin,
            "purchased_options": dict(s.options),
            "price": self.catalog.prices[s.asin],
        }
        return ActionResult(True, reward=reward, done=True, details=details)
