"""WebShop's privileged expert: the remaining path to the goal product from any page.

The expert knows the goal's product (``goal["asin"]``) and options, and shops the way the
benchmark's pages allow: it searches the goal's instruction text, pages through the results
("next >" / "< prev") until the goal product is listed, opens it, clicks the goal's option
values and buys. It replans from the session's current state on every call (like ALFWorld's
planner), so it can take over after any sequence of actions: from a sub-page it goes back to
the item, from another product back to the results or to the search page.

Why the instruction text and not ``goal["query"]`` (the category query the product was
scraped under): on the 500 test goals of the official small catalog, the instruction lists the
goal product within the 50 results for 99.8% of the goals (90.8% on page 1), the category
query for 85.4% (52% on page 1); and a policy can read the instruction, while the category
query is hidden from it, so the instruction is also the search a policy can imitate.

Why page through all results: the engine returns at most 50 products (5 pages), and walking to
page 5 costs 4 clicks, well within the 15-step episode; a product outside the 50 results is
unreachable from that search. Then the expert buys the top result instead (with whichever goal
options it offers), which scores what the reward gives a near miss: the expert's mean score is
an upper bound of this search, below 1.0 where the search misses the product.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orsd_gym.envs.webshop import pages
from orsd_gym.envs.webshop.search import ProductSearchEngine
from orsd_gym.envs.webshop.shop import ShopSession

BUY = "click[buy now]"
NEXT_PAGE = "click[next >]"
PREVIOUS = "click[< prev]"
BACK_TO_SEARCH = "click[back to search]"


def expert_query(goal: Mapping[str, Any]) -> str:
    """The expert's search keywords: the goal's instruction text, without square brackets
    (the action parser would split ``search[...]`` at them) and on one line."""
    text = str(goal["instruction_text"]).replace("[", " ").replace("]", " ")
    return " ".join(text.split())


def wanted_options(product: Mapping[str, Any], goal: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The goal's options this product offers, as (option name, value) pairs in the goal's order.

    Synthetic goals name each option (``{"size": "8"}``); human goals list bare values, which
    are looked up among the product's option names. A value clicked on the item page selects
    what its text is routed to, so a value whose text a button or an earlier option value
    already claims cannot be chosen and is left out.
    """
    offered: Mapping[str, Sequence[str]] = product["options"]
    goal_options = goal.get("goal_options") or {}
    if isinstance(goal_options, Mapping):
        pairs = [(str(name).lower(), str(value).lower()) for name, value in goal_options.items()]
    else:
        pairs = []
        for value in goal_options:
            value = str(value).lower()
            name = next((n for n, values in offered.items() if value in values), None)
            if name is not None:
                pairs.append((name, value))
    clickables = pages.item_page("", product, {}, "").clickables
    return [
        (name, value)
        for name, value in pairs
        if value in offered.get(name, ()) and clickables.get(value) == ("option", name, value)
    ]


class WebShopExpert:
    """The expert for one goal; `plan` gives the remaining actions from a session's state.

    Args:
        engine: the shop's search engine (the expert's search is run once, here).
        goal: the goal being played (a goal without ``asin``, e.g. a custom one, is shopped
            for by buying the top result).
        query: the search keywords (default: `expert_query`, the instruction text).
    """

    def __init__(self, engine: ProductSearchEngine, goal: Mapping[str, Any], query: str | None = None) -> None:
        self.goal = goal
        self.query = expert_query(goal) if query is None else query
        self.results: list[str] = engine.search(self.query)
        goal_asin = goal.get("asin")
        fallback = self.results[0] if self.results else None
        #: The product the expert buys: the goal's when its search lists it, else the top result.
        self.target: str | None = goal_asin if goal_asin in self.results else fallback

    @property
    def finds_goal(self) -> bool:
        """Whether the expert's search lists the goal product (within its 50 results)."""
        return self.target is not None and self.target == self.goal.get("asin")

    def plan(self, session: ShopSession) -> list[str]:
        """The actions that buy the target from the session's current page (empty when the
        purchase is done or the search lists no product at all)."""
        state = session.state
        if state.page == "done" or self.target is None:
            return []
        target = self._target_for(session)
        actions: list[str] = []
        page = state.page
        if page == "subpage":
            actions.append(PREVIOUS)
            page = "item"
        if page == "item" and state.asin == target:
            chosen = dict(state.options)
            return actions + self._choose_and_buy(session, target, chosen)
        # The results the current query listed stay reachable with "< prev" from an item page.
        listed = state.results if page != "start" else []
        if target in listed:
            if page == "item":
                actions.append(PREVIOUS)
            current_page = state.results_page
        else:
            if page != "start":
                actions.append(BACK_TO_SEARCH)
            actions.append(f"search[{self.query}]")
            listed, current_page = self.results, 1
        wanted_page = listed.index(target) // pages.RESULTS_PER_PAGE + 1
        step = NEXT_PAGE if wanted_page > current_page else PREVIOUS
        actions += [step] * abs(wanted_page - current_page)
        actions.append(f"click[{target.lower()}]")
        return actions + self._choose_and_buy(session, target, {})

    def _target_for(self, session: ShopSession) -> str:
        # A goal product listed by the session's own search counts too (a policy's query may find it).
        goal_asin = self.goal.get("asin")
        if goal_asin is not None and session.state.page != "start" and goal_asin in session.state.results:
            return goal_asin
        assert self.target is not None
        return self.target

    def _choose_and_buy(self, session: ShopSession, asin: str, chosen: Mapping[str, str]) -> list[str]:
        product = session.catalog.by_asin[asin]
        clicks = [f"click[{value}]" for name, value in wanted_options(product, self.goal) if chosen.get(name) != value]
        return clicks + [BUY]
