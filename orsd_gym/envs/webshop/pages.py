"""WebShop's pages as element lists, and their two text renderings.

A page is what the benchmark's HTML shows, reduced to its visible text nodes in document
order, each tagged with what it is (plain text, button, option value, product link) and, for
the clickable ones, what clicking does. An element's text is the text node exactly as the
HTML holds it (template spaces included, e.g. the space before each feature bullet). The
renderings follow the benchmark's text env, which walks those text nodes:

* ``text``: every node stripped (Python's ``str.strip``, so only the ends lose whitespace;
  a non-breaking space inside a value stays) and joined with " [SEP] ";
* ``text_rich``: every node unstripped and followed by one newline: buttons as
  ``[button] X [button_]``, option values indented (``  [clicked button] X [clicked button_]``
  when shown as clicked), product links after a blank line, plain text as it is, and a
  ``You have clicked X.`` line on top for every option shown as clicked (the last one in the
  page first).

Clickables are the lower-cased button and product-link texts, then the option values.
"""

from __future__ import annotations

import json
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
        # HTML has no empty text nodes, and the benchmark skips nodes that are exactly "\n".
        self.elements = [e for e in self.elements if e.text not in ("", "\n")]
        clickables: dict[str, Target | None] = {}
        for element in self.elements:
            if element.kind in ("button", "link"):
                clickables[element.text.lower()] = element.target
        for element in self.elements:
            # The benchmark routes a click by its text before looking at what was clicked, so an
            # option value that repeats a button's text does what the button does.
            if element.kind == "option" and element.text not in clickables:
                clickables[element.text] = element.target
        self.clickables = clickables

    def render(self, mode: str) -> str:
        if mode == "text":
            return " [SEP] ".join(e.text.strip() for e in self.elements)
        if mode == "text_rich":
            return _render_rich(self.elements)
        raise ValueError(f"observation_mode={mode!r}; choose one of {OBSERVATION_MODES}")


def _render_rich(elements: Sequence[Element]) -> str:
    clicked_lines = []
    lines = []
    for element in elements:
        text = element.text
        if element.kind == "button":
            lines.append(f"[button] {text} [button_]")
        elif element.kind == "option":
            if element.selected:
                lines.append(f"  [clicked button] {text} [clicked button_]")
                clicked_lines.insert(0, f"You have clicked {text}.\n")
            else:
                lines.append(f"  [button] {text} [button_]")
        elif element.kind == "link":
            tag = "clicked button" if element.selected else "button"
            lines.append(f"\n[{tag}] {text} [{tag}_]")
        else:
            lines.append(text)
    return "".join(clicked_lines) + "".join(f"{line}\n" for line in lines)


def _instruction(instruction: str) -> list[Element]:
    return [Element("text", "Instruction:"), Element("text", instruction)]


def start_page(instruction: str) -> Page:
    # The search page's heading keeps a space after the colon (other pages have none). Its search
    # button does nothing in the benchmark's text env (you type search[...]).
    return Page(
        [
            Element("text", "WebShop"),
            Element("text", "Instruction: "),
            Element("text", instruction),
            Element("button", "Search"),
        ],
        has_search_bar=True,
    )


def results_page(
    instruction: str,
    products: Sequence[Mapping[str, Any]],
    total: int,
    page: int,
    visited: set[str],
) -> Page:
    """``products`` are this page's (at most 10) results out of ``total``."""
    elements = [
        *_instruction(instruction),
        Element("button", "Back to Search", ("start",)),
        Element("text", f"Page {page} (Total results: {total})"),
    ]
    if page > 1:
        elements.append(Element("button", "< Prev", ("results", page - 1)))
    # As in the benchmark, "Next >" is always offered; past the last result a page is empty.
    elements.append(Element("button", "Next >", ("results", page + 1)))
    for product in products:
        asin = product["asin"]
        elements += [
            Element("link", asin, ("item", asin), selected=asin in visited),
            Element("text", product["Title"]),
            Element("text", product["Price"]),
        ]
    return Page(elements)


def shown_as_clicked(value: str, query: str, chosen: Mapping[str, str]) -> bool:
    """Whether the benchmark's text_rich mode marks option ``value`` as clicked.

    It does not look at the chosen options themselves but searches the item page's URL, which
    holds the query words joined by "+" and ``json.dumps`` of the chosen options, for the value
    in double quotes. So a value JSON escapes (a double quote, any non-ASCII character such as a
    non-breaking space) is never marked, and a value that is quoted in the query, or equals a
    chosen option's name, is.
    """
    url_text = f"{query.replace(' ', '+')}/{json.dumps(dict(chosen))}"
    return f'"{value}"' in url_text


def item_page(instruction: str, product: Mapping[str, Any], chosen: Mapping[str, str], query: str) -> Page:
    """``chosen``: the selected option values by name, in the order they were first chosen;
    ``query``: the search that led here."""
    elements = [
        *_instruction(instruction),
        Element("button", "Back to Search", ("start",)),
        Element("button", "< Prev", ("prev",)),
    ]
    for name, values in product["options"].items():
        elements.append(Element("text", name))
        elements += [
            Element("option", v, ("option", name, v), selected=shown_as_clicked(v, query, chosen)) for v in values
        ]
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
    """``description``: the description text; ``features``: one entry per bullet point, after
    the space the benchmark's template puts before each; ``reviews``: one entry per review
    field (the official data ships no reviews)."""
    elements = [
        *_instruction(instruction),
        Element("button", "Back to Search", ("start",)),
        Element("button", "< Prev", ("prev",)),
    ]
    if name == "description":
        elements.append(Element("text", product["Description"]))
    elif name == "features":
        elements += [Element("text", f" {bullet}") for bullet in product["BulletPoints"]]
    elif name == "reviews":
        for review in product.get("Reviews") or []:
            elements += [Element("text", str(review.get(key, ""))) for key in ("title", "score", "body")]
    else:
        raise ValueError(f"unknown sub-page {name!r}")
    return Page(elements)


def options_json(options: Mapping[str, str]) -> str:
    """The chosen options as the done page prints them: Flask's ``tojson`` (sorted keys, ASCII
    escapes, and ``< > & '`` escaped as ``\\u003c`` etc. to be safe inside HTML)."""
    text = json.dumps(dict(options), sort_keys=True)
    for char in "<>&'":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


#: Headings of the done page's hidden purchase and target panels. The benchmark's text env does
#: not pass their values to the template, so each prints "None" or nothing ("instuction" sic).
_DONE_PURCHASE_FIELDS = ("attrs", "None", "category", "None", "query", "None", "product category", "None")
_DONE_TARGET_FIELDS = (
    "Target",
    "asin",
    "options",
    "attrs",
    "price upper",
    "instuction text",
    "category",
    "product category",
    "query",
    "Goal ",
    "None",
    "Reward",
)


def done_page(asin: str, options: Mapping[str, str], reward: float) -> Page:
    texts = [
        "Thank you for shopping with us!",
        "Your code: ",
        "None",
        " (Paste it in your MTurk interface.)",
        "Purchased",
        "asin",
        asin,
        "options",
        options_json(options),
        *_DONE_PURCHASE_FIELDS,
        *_DONE_TARGET_FIELDS,
        "Your score (min 0.0, max 1.0)",
        str(reward),
        "Reward Details ",
        "None",
    ]
    return Page([Element("text", text) for text in texts])
