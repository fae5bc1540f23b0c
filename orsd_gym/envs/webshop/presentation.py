"""How WebShop is presented: its prompt, its expert's criteria, its search template (no rubric
worked example).

The expert's plan (``search[...]`` / ``click[...]``) reads as criteria saying what to search
for, which product to open (and on which results page), which options to select, and buying it
after the options.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any

from orsd_gym.envs.presentation import Criterion, DefaultPresentation, EnvPrompt
from orsd_gym.envs.webshop.shop import SEARCH_TEMPLATE

_WEB_ACTION = re.compile(r"^(?P<kind>search|click)\[(?P<argument>.*)\]$")
#: Buttons (clicked text, lower-cased) that move between pages rather than choose something.
_WEB_NAVIGATION = frozenset({"next >", "< prev", "back to search", "description", "features", "reviews"})
_WEB_BUY = "buy now"
#: Words of the search query quoted in a criterion (the expert searches the whole instruction).
_QUERY_WORDS = 8

WEBSHOP_PROMPT = EnvPrompt(
    "You are shopping on a website for a product that matches the instruction. "
    "Actions are 'search[keywords]' on the search page and 'click[button or product]' elsewhere; "
    "buy the best match with click[Buy Now].",
    noop_action="click[< Prev]",
)


def search_with_task(info: dict[str, Any]) -> str:
    """``search[<the task text>]``: WebShop's rule-based baseline searches with the instruction."""
    return f"search[{info['task']}]"


class WebShopPresentation(DefaultPresentation):
    """WebShop's presentation hooks (`orsd_gym.envs.presentation`), mixed into its env."""

    prompt = WEBSHOP_PROMPT
    action_templates = MappingProxyType({SEARCH_TEMPLATE: search_with_task})

    @classmethod
    def expert_criteria(cls, actions: list[str], max_criteria: int) -> list[Criterion]:
        return webshop_criteria(actions)


def webshop_criteria(actions: list[str]) -> list[Criterion]:
    out: list[Criterion] = []
    product_at: int | None = None
    result_page = 1
    options: list[tuple[int, str]] = []
    for i, action in enumerate(actions):
        match = _WEB_ACTION.match(action)
        if match is None:
            continue
        argument = match["argument"]
        if match["kind"] == "search":
            words = argument.split()
            quoted = " ".join(words[:_QUERY_WORDS]) + (" ..." if len(words) > _QUERY_WORDS else "")
            out.append(Criterion(f'Searches for "{quoted}"', i, 2))
            product_at, result_page, options = None, 1, []
        elif argument in _WEB_NAVIGATION:
            result_page += {"next >": 1, "< prev": -1}.get(argument, 0)
        elif argument == _WEB_BUY:
            after = " after selecting its options" if options else ""
            out.append(Criterion(f"Buys the product it opened{after}", i, 3))
        elif product_at is None:
            product_at = i
            where = f" (on results page {result_page})" if result_page > 1 else ""
            out.append(Criterion(f"Opens product {argument.upper()}{where}", i, 0))
        else:
            options.append((i, argument))
    if options:
        values = ", ".join(value for _, value in options)
        out.append(Criterion(f"Selects the options {values}", options[0][0], 1))
    return out
