"""WebShop goals: synthetic goals (one per option combination of an instructed product) and
human goals, with the benchmark's price constraint, weights, shuffle and test/train split."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orsd_gym.envs.webshop.data import Catalog
from orsd_gym.errors import GoalError

#: Price bounds an instruction can name: 10, 20, ..., 990 dollars.
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
NO_PRICE_LIMIT = 1_000_000
#: The benchmark shuffles its goal list with `random.seed(233); random.shuffle(goals)`. Using the
#: same seed with a private `random.Random` reproduces its goal order (and so its test split).
GOAL_SHUFFLE_SEED = 233
TEST_GOALS = 500
SPLITS = ("test", "train", "all")
GOAL_KEYS = (
    "asin",
    "category",
    "query",
    "name",
    "product_category",
    "instruction_text",
    "attributes",
    "price_upper",
    "goal_options",
    "weight",
)


def price_constraint(price: float, rng: np.random.Generator) -> tuple[float, str]:
    """(price_upper, price text): the larger of two bounds drawn from the first four
    of PRICE_RANGE above ``price``; no constraint when fewer than two exist."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return NO_PRICE_LIMIT, ""
    upper = float(max(rng.choice(above, size=2, replace=False)))
    return upper, f", and price lower than {upper:.2f} dollars"


def synthetic_goals(catalog: Catalog, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One goal per combination of option values (option names sorted) of every product
    that has an instruction; unshuffled."""
    goals: list[dict[str, Any]] = []
    for product in catalog.products:
        instruction = product.get("instruction_text")
        if instruction is None:
            continue
        price_upper, price_text = price_constraint(catalog.prices[product["asin"]], rng)
        options = product["options"]
        names = sorted(options)
        for combination in itertools.product(*(options[name] for name in names)):
            goal_options = dict(zip(names, combination, strict=True))
            option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
            option_text = f" with {option_text}" if option_text else ""
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": f"{instruction}{option_text}{price_text}",
                    "attributes": list(product["instruction_attributes"] or []),
                    "price_upper": price_upper,
                    "goal_options": goal_options,
                }
            )
    _add_weights(goals)
    return goals


def human_goals(catalog: Catalog, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Goals from items_human_ins for the catalog's products (entries without attributes are
    skipped, as in the benchmark); weight 1; unshuffled."""
    goals: list[dict[str, Any]] = []
    for product in catalog.products:
        for entry in catalog.human_instructions.get(product["asin"], []):
            attributes = entry.get("instruction_attributes") or []
            if not attributes:
                continue
            price_upper, price_text = price_constraint(catalog.prices[product["asin"]], rng)
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["name"],
                    "product_category": product["product_category"],
                    "instruction_text": str(entry.get("instruction", "")).strip(".") + price_text,
                    "attributes": list(attributes),
                    "price_upper": price_upper,
                    "goal_options": entry.get("instruction_options") or [],
                    "weight": 1.0,
                }
            )
    return goals


def _add_weights(goals: list[dict[str, Any]]) -> None:
    # Rare attributes weigh more: mean over a goal's attributes of 1 / #goals using it.
    uses: dict[str, int] = defaultdict(int)
    for goal in goals:
        for attribute in goal["attributes"]:
            uses[attribute] += 1
    for goal in goals:
        attributes = goal["attributes"]
        goal["weight"] = sum(1.0 / uses[a] for a in attributes) / len(attributes) if attributes else 0.0


def build_goals(catalog: Catalog, *, human: bool, seed: int) -> list[dict[str, Any]]:
    """The catalog's goal list in the benchmark's (shuffled) order. ``seed`` drives the price
    bounds; the shuffle uses the benchmark's fixed seed."""
    rng = np.random.default_rng([seed, 1])  # a stream apart from the catalog's price draws
    goals = human_goals(catalog, rng) if human else synthetic_goals(catalog, rng)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return goals


def split_goals(goals: Sequence[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """test = the first 500 goals, train = the rest, all = every goal."""
    if split == "test":
        return list(goals[:TEST_GOALS])
    if split == "train":
        return list(goals[TEST_GOALS:])
    if split == "all":
        return list(goals)
    raise GoalError(f"goal_split={split!r}; choose one of {SPLITS}")


def validate_goal(goal: Any) -> dict[str, Any]:
    """Check a user-given goal dict (to replay a published episode) and fill defaults."""
    if not isinstance(goal, Mapping):
        raise GoalError(f"options['goal'] must be a dict in WebShop's goal format, got {type(goal).__name__}")
    required = ("instruction_text", "attributes", "goal_options", "price_upper", "query", "product_category", "name")
    missing = [key for key in required if key not in goal]
    if missing:
        raise GoalError(f"options['goal'] lacks {missing}; a goal needs {list(required)}")
    if not isinstance(goal["instruction_text"], str) or not goal["instruction_text"].strip():
        raise GoalError("options['goal']['instruction_text'] must be a non-empty string")
    if not isinstance(goal["attributes"], (list, tuple)):
        raise GoalError("options['goal']['attributes'] must be a list of strings")
    if not isinstance(goal["goal_options"], (Mapping, list, tuple)):
        raise GoalError("options['goal']['goal_options'] must be a dict {name: value} or a list of values")
    try:
        price_upper = float(goal["price_upper"])
    except (TypeError, ValueError) as error:
        raise GoalError(f"options['goal']['price_upper']={goal['price_upper']!r} is not a number") from error
    checked = dict(goal)
    checked["price_upper"] = price_upper
    checked.setdefault("asin", None)
    checked.setdefault("category", "")
    checked.setdefault("weight", 1.0)
    return checked
