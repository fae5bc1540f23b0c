"""The purchase reward, branch by branch (type, attributes, options, price, weights)."""

from __future__ import annotations

import pytest
from rapidfuzz import fuzz

from orsd_gym.envs.webshop import reward as reward_module
from orsd_gym.envs.webshop.reward import (
    attribute_matches,
    fuzzy_token_set_ratio,
    goal_option_terms,
    normalize_color,
    option_matches,
    purchase_reward,
    title_nouns,
    type_reward,
)

CATEGORY = "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts"


def product(**overrides):
    base = {
        "asin": "B0TEST0001",
        "name": "Classic Cotton T-Shirt",
        "Title": "Classic Cotton T-Shirt",
        "query": "men's t-shirt",
        "product_category": CATEGORY,
        "Attributes": ["machine wash", "short sleeve"],
        "BulletPoints": ["Soft fabric", "Relaxed fit"],
        "Description": "A breathable everyday tee.",
    }
    return {**base, **overrides}


def goal(**overrides):
    base = {
        "asin": "B0TEST0001",
        "name": "Classic Cotton T-Shirt",
        "query": "men's t-shirt",
        "product_category": CATEGORY,
        "attributes": ["machine wash"],
        "goal_options": {"color": "navy blue", "size": "large"},
        "price_upper": 30.0,
        "instruction_text": "i need a machine wash t-shirt",
    }
    return {**base, **overrides}


@pytest.fixture
def fake_nouns(monkeypatch):
    """Control the POS tagger's nouns per name, to reach each title-score branch exactly."""
    table: dict[str, tuple[str, ...]] = {}
    monkeypatch.setattr(reward_module, "title_nouns", lambda name: table[name])
    return table


# --------------------------------------------------------------------------- r_type
def test_same_product_scores_one():
    value, details = purchase_reward(product(), goal(), 20.0, {"color": "navy blue", "size": "large"})
    assert value == 1.0
    assert details["r_type"] == 1.0 and details["query_match"] and details["category_match"]
    assert details["title_score"] == 1.0 and details["r_att"] == details["r_option"] == 1.0 and details["r_price"]
    assert details["w_att"] + details["w_option"] + details["w_price"] == pytest.approx(1.0)


def test_real_pos_tagger_finds_title_nouns():
    nouns = title_nouns("Ergonomic Office Chair with Lumbar Support, Black")
    assert {"chair", "office", "support"} <= set(nouns)
    assert "with" not in nouns


@pytest.mark.parametrize(
    ("goal_nouns", "product_nouns", "query", "levels", "expected_r_type", "expected_title"),
    [
        # title score == 0 -> 0, even when the query and the category match
        (("shirt",), ("mug",), "same", CATEGORY, 0.0, 0.0),
        # 0 < title score < 0.1 -> 0.1
        (tuple(f"n{i}" for i in range(11)), ("n0",), "same", CATEGORY, 0.1, 1 / 11),
        # 0.1 <= title score <= 0.2 and nothing else matches -> 0.5
        (("a", "b", "c", "d", "e"), ("a",), "other", "X › Y", 0.5, 0.2),
        # ... but a query match makes it 1
        (("a", "b", "c", "d", "e"), ("a",), "same", "X › Y", 1.0, 0.2),
        # ... and so does a category match (>= 2 shared levels)
        (("a", "b", "c", "d", "e"), ("a",), "other", "Clothing, Shoes & Jewelry › Men", 1.0, 0.2),
        # one shared level is no category match
        (("a", "b", "c", "d", "e"), ("a",), "other", "Clothing, Shoes & Jewelry › Women", 0.5, 0.2),
        # title score > 0.2 alone is a match
        (("a", "b", "c"), ("a",), "other", "X › Y", 1.0, 1 / 3),
        # a goal name without nouns scores 0.2 (and with no other match: 0.5)
        ((), ("a",), "other", "X › Y", 0.5, 0.2),
        # distinct shared nouns over the goal's noun count (repeats count in the denominator)
        (("bag", "bag", "tote"), ("bag",), "other", "X › Y", 1.0, 1 / 3),
    ],
)
def test_type_reward_branches(fake_nouns, goal_nouns, product_nouns, query, levels, expected_r_type, expected_title):
    fake_nouns["goal name"] = goal_nouns
    fake_nouns["product name"] = product_nouns
    p = product(name="product name", query="same", product_category=CATEGORY)
    g = goal(name="goal name", query=query, product_category=levels)
    details = type_reward(p, g)
    assert details["r_type"] == expected_r_type
    assert details["title_score"] == pytest.approx(expected_title)
    value, full = purchase_reward(p, g, 1.0, {"color": "navy blue", "size": "large"})
    assert value == pytest.approx(expected_r_type)  # everything else matches
    assert full["r_type"] == expected_r_type


def test_category_levels_are_stripped_and_unordered():
    p = product(product_category=" Men ›Clothing› Shirts")
    assert type_reward(p, goal(query="x", product_category="Shirts › Men"))["category_match"]


# --------------------------------------------------------------------------- attributes
def test_fuzzy_ratio_follows_thefuzz_processing_and_rounding():
    assert fuzzy_token_set_ratio("gluten free", "Free GLUTEN!") == 100
    assert fuzzy_token_set_ratio("long lasting", "long-lasting") == 100  # punctuation -> space
    raw = fuzz.token_set_ratio("machine wash", "machine washable")
    assert 85 < raw < 86 and fuzzy_token_set_ratio("machine wash", "machine washable") == 86
    assert fuzzy_token_set_ratio("café", "cafe") == fuzz.token_set_ratio("caf", "cafe").__round__()  # é deleted
    assert fuzzy_token_set_ratio("men\u2019s", "men s") == 100  # only U+0080..U+00FF are deleted; ’ -> space
    assert fuzzy_token_set_ratio("8", ("size", "8")) == 100  # a non-string compares as its str()
    assert fuzzy_token_set_ratio("", "x") == 0 and fuzzy_token_set_ratio("!!", "x") == 0


def test_attribute_matching_branches():
    p = product(
        Attributes=["Gluten-Free", "low sugar"],
        Title="Crunchy Protein Bar, High Protein",
        BulletPoints=["Made with real almonds", "Keto friendly"],
        Description="Non GMO ingredients.",
    )
    assert attribute_matches(p, ["free gluten"]) == 1  # fuzzy against an attribute
    assert attribute_matches(p, ["high protein"]) == 1  # substring of the title
    assert attribute_matches(p, ["almonds keto"]) == 1  # substring of the bullets joined with spaces
    assert attribute_matches(p, ["almonds friendly"]) == 0  # a substring test, not a bag of words
    assert attribute_matches(p, ["non gmo"]) == 1  # substring of the description
    assert attribute_matches(p, ["dairy free"]) == 0
    value, details = purchase_reward(
        p, goal(name=p["name"], attributes=["high protein", "dairy free"]), 1.0, {"color": "navy blue", "size": "large"}
    )
    assert details["r_att"] == 0.5 and value == pytest.approx((1 + 2 + 1) / 5)


# --------------------------------------------------------------------------- options
def test_color_normalisation_takes_the_first_listed_colour():
    assert normalize_color("navy blue") == "blue"  # "blue" precedes "navy" in WebShop's list
    assert normalize_color("dark green") == "dark"
    assert normalize_color("x-large") == "x-large"


def test_option_matching_branches():
    assert option_matches(["sky blue"], ["light blue"]) == 1  # both normalise to "blue"
    assert option_matches(["navy"], ["navy blue"]) == 0  # "navy" vs "blue"
    assert option_matches(["large", "red"], ["large", "red"]) == 2
    assert option_matches(["x-large"], ["large"]) == 1  # token-set ratio 100
    assert option_matches(["small"], ["large"]) == 0
    assert option_matches([], ["large"]) == 0


def test_goal_options_as_a_list_and_no_options():
    p = product()
    for matching in ("pairs", "values"):  # a list has no names: both match its values
        value, details = purchase_reward(p, goal(goal_options=["large"]), 1.0, {"size": "large"}, matching)
        assert value == 1.0 and details["r_option"] == 1.0 and details["option_matching"] == matching
    value, details = purchase_reward(p, goal(goal_options={}), 1.0, {"size": "small"})
    assert value == 1.0 and details["r_option"] is None and details["w_option"] == 0.0
    value, details = purchase_reward(p, goal(), 1.0, {"size": "large"})  # colour not chosen
    assert details["r_option"] == 0.5 and value == pytest.approx(3 / 4)


# --------------------------------------------------------------------------- pairs vs values
def test_a_pair_normalises_only_when_its_name_or_whole_value_is_a_colour():
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "black2070")) == ("color", "black2070")  # membership, not substring
    assert normalize_color(("color", "navy blue")) == ("color", "navy blue")
    assert normalize_color("black2070") == "black"  # a chosen value is a string: substring test


def test_goal_option_terms():
    options = {"color": "black2070", "size": "8"}
    assert goal_option_terms(options, "pairs") == [("color", "black2070"), ("size", "8")]
    assert goal_option_terms(options, "values") == ["black2070", "8"]
    assert goal_option_terms(["8"], "pairs") == goal_option_terms(["8"], "values") == ["8"]
    with pytest.raises(ValueError, match="option_matching='names'"):
        goal_option_terms(options, "names")


@pytest.mark.parametrize(
    ("goal_options", "chosen", "pairs", "values"),
    [
        # The benchmark's own goal, bought exactly: "black2070" is chosen as "black", and
        # "black" shares no token with "('color', 'black2070')".
        ({"color": "black2070", "size": "8"}, {"color": "black2070", "size": "8"}, 0.5, 1.0),
        # "rectangular" contains "tan", so the chosen value normalises to a colour the pair lacks.
        ({"item shape": "rectangular"}, {"item shape": "rectangular"}, 0.0, 1.0),
        # A colour that is the whole value normalises the pair too.
        ({"color": "black", "size": "8"}, {"color": "black", "size": "8"}, 1.0, 1.0),
        ({"color": "navy blue"}, {"color": "navy blue"}, 1.0, 1.0),  # "blue" is one of the pair's tokens
        # The pair's name is a token too: choosing a value equal to it matches under pairs.
        ({"size": "xl"}, {"size": "size"}, 1.0, 0.0),
        ({"size": "8"}, {"size": "9"}, 0.0, 0.0),
    ],
)
def test_pairs_and_values_matching(goal_options, chosen, pairs, values):
    g = goal(goal_options=goal_options)
    for matching, expected in (("pairs", pairs), ("values", values)):
        _, details = purchase_reward(product(), g, 1.0, chosen, matching)
        assert details["r_option"] == expected and details["option_matching"] == matching


def test_pairs_is_the_default():
    g = goal(goal_options={"color": "black2070", "size": "8"})
    value, details = purchase_reward(product(), g, 1.0, {"color": "black2070", "size": "8"})
    assert details["option_matching"] == "pairs" and value == pytest.approx((1 + 1 + 1) / 4)


# --------------------------------------------------------------------------- price
def test_price_branch():
    g = goal(price_upper=30.0)
    assert purchase_reward(product(), g, 30.0, {"color": "blue", "size": "large"})[1]["r_price"] is True
    value, details = purchase_reward(product(), g, 30.01, {"color": "blue", "size": "large"})
    assert details["r_price"] is False and value == pytest.approx(3 / 4)


def test_formula_combines_all_parts():
    g = goal(attributes=["machine wash", "organic", "v neck"], goal_options={"size": "large", "color": "red"})
    value, details = purchase_reward(product(), g, 50.0, {"size": "large", "color": "blue"})
    # 1 of 3 attributes, 1 of 2 options, price too high: 2 / 6
    assert value == pytest.approx(2 / 6)
    assert details["w_att"] == pytest.approx(3 / 6) and details["w_option"] == pytest.approx(2 / 6)
    assert details["w_price"] == pytest.approx(1 / 6)


def test_missing_pos_model_is_reported_before_any_episode(monkeypatch):
    monkeypatch.setattr(reward_module, "SPACY_MODELS", ("no_such_spacy_model_xyz",))
    with pytest.raises(reward_module.POSTaggerUnavailable, match="pip install"):
        reward_module.check_pos_tagger()
