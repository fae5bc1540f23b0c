"""WebShop's pages as element lists, and their two text renderings.

A page is what the benchmark's HTML shows, reduced to its visible strings in document order,
each tagged with what it is (plain text, button, option value, product link) and, for the
clickable ones, what clicking does. The renderings follow the benchmark's text env:

* ``text``: the visible strings joined with " [SEP] ";
* ``text_rich``: one element per line: buttons ``[button] X [button_]``, option values indented
  (``  [clicked button] X [clicked button_]`` when selected), product links and plain text on
  lines of their own after a blank line, and ``You have clicked X.`` lines at the top for
  every selected option.

Clickables are the lower-cased button and product-link texts, then the option values (a value
that repeats a button's text takes over its click, as in the benchmark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

RESULTS_PER_PAGE = 10
OBSERVATION_MODES = ("text", "text_rich")

# What a click does. ("start",) back to search; ("results", page); ("item", asin);
# ("subpage", name); ("option", name, value); ("prev",) one level up; ("buy",); None: inert.
Target = tuple


@dataclass(frozen=True)
class Element:
    kind: str  # "text" | "button" | "option" | "link"
    text: str
    target: Target | None = None
    selected: bool = False


@dataclass
class Page:
    elements: list[Element]
    has_search_bar: bool = False
    clickables: dict[str, Target | None] = field(init=False)

    def __post_init__(self) -> None:
        clickables: dict[str, Target | None] = {}
        for kind in (("button", "link"), ("option",)):
            for element in self.elements:
                if element.kind in kind:
                    clickables[element.text.lower() if element.kind != "option" else element.text] = element.target
        self.clickables = clickables

    def render(self, mode: str) -> str:
        if mode == "text":
            return " [SEP] ".join(e.text.strip() for e in self.elements if e.text.strip())
        if mode == "text_rich":
            return _render_rich(self.elements)
        raise ValueError(f"observation_mode={mode!r}; choose one of {OBSERVATION_MODES}")


def _render_rich(elements: Sequence[Element]) -> str:
    clicked_lines = []
    body = []
    for element in elements:
        if element.kind == "button":
            body.append(f"[button] {element.text} [button_]\n")
        elif element.kind == "option":
            if element.selected:
                body.append(f"  [clicked button] {element.text} [clicked button_]\n")
                clicked_lines.insert(0, f"You have clicked {element.text}.\n")
            else:
                body.append(f"  [button] {element.text} [button_]\n")
        elif element.kind == "link":
            tag = "clicked button" if element.selected else "button"
            body.append(f"\n[{tag}] {element.text} [{tag}_]\n")
        elif element.text.strip():
            body.append(f"\n{element.text}\n")
    return "".join(clicked_lines) + "".join(body)


def _instruction(instruction: str) -> list[Element]:
    return [Element("text", "Instruction:"), Element("text", instruction)]


def start_page(instruction: str) -> Page:
    # The benchmark's search button does nothing in its text env (you type search[...]).
    return Page([Element("text", "WebShop"), *_instruction(instruction), Element("button", "Search")], has_search_bar=True)


def results_page(
    instruction: str,
    products: Sequence[Mapping[str, Any]],
    total: int,
    page: int,
    visited: set[str],
) -> Page:
    """``products`` are this page's (at most 10) results out of ``total``."""
    elements = [*_instruction(instruction), Element("button", "Back to Search", ("start",)),
                Element("text", f"Page {page} (Total results: {total})")]
    if page > 1:
        elements.append(Element("button", "< Prev", ("results", page - 1)))
    # As in the benchmark, "Next >" is always offered; past the last result a page is empty.
    elements.append(Element("button", "Next >", ("results", page + 1)))
    for product in products:
        asin = product["asin"]
        elements += [Element("link", asin, ("item", asin), selected=asin in visited),
                     Element("text", product["Title"]), Element("text", product["Price"])]
    return Page(elements)


def item_page(instruction: str, product: Mapping[str, Any], chosen: Mapping[str, str]) -> Page:
    elements = [*_instruction(instruction), Element("button", "Back to Search", ("start",)),
                Element("button", "< Prev", ("prev",))]
    for name, values in product["options"].items():
        elements.append(Element("text", name))
        elements += [Element("option", v, ("option", name, v), selected=chosen.get(name) == v) for v in values]
    elements += [
        Element("text", product["Title"]),
        Element("text", f"Price: {product['Price']}"),
        Element("text", f"Rating: {product['Rating']}"),
        Element("button", "Description", ("subpage", "description")),
        Element("button", "Features", ("subpage", "features")),
        Element("button", "Reviews", ("subpage", "reviews")),
        Element("button", "Buy Now", ("buy",)),
    ]
    return Page(elements)


def sub_page(instruction: str, product: Mapping[str, Any], name: str) -> Page:
    """``description``: the description text; ``features``: one entry per bullet point;
    ``reviews``: one entry per review field (the official data ships no reviews)."""
    elements = [*_instruction(instruction), Element("button", "Back to Search", ("start",)),
                Element("button", "< Prev", ("prev",))]
    if name == "description":
        elements.append(Element("text", product["Description"]))
    elif name == "features":
        elements += [Element("text", bullet) for bullet in product["BulletPoints"]]
    elif name == "reviews":
        for review in product.get("Reviews") or []:
            elements += [Element("text", str(review.get(key, ""))) for key in ("title", "score", "body")]
    else:
        raise ValueError(f"unknown sub-page {name!r}")
    return Page(elements)


def done_page(asin: str, options: Mapping[str, str], reward: float) -> Page:
    return Page([
        Element("text", "Thank you for shopping with us!"),
        Element("text", "Purchased"),
        Element("text", "asin"),
        Element("text", asin),
        Element("text", "options"),
        Element("text", str(dict(options))),
        Element("text", "Your score (min 0.0, max 1.0)"),
        Element("text", str(reward)),
    ])
