"""WebShop data: streamed JSON, product processing, goals and splits, the synthetic catalog."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orsd_gym.envs.webshop.data import (
    DUMMY_ATTRIBUTE,
    build_catalog,
    catalog_files,
    load_catalog,
    parse_options,
    parse_pricing,
    process_products,
    resolve_data_dir,
)
from orsd_gym.envs.webshop.goals import NO_PRICE_LIMIT, build_goals, price_constraint, split_goals, validate_goal
from orsd_gym.envs.webshop.jsonstream import iter_json_array, iter_json_object
from orsd_gym.envs.webshop.synthetic import synthetic_catalog_data, synthetic_records, write_synthetic_data
from orsd_gym.errors import GoalError, JSONStreamError, WebShopDataError

PROCESSED_FIELDS = {
    "asin",
    "name",
    "category",
    "query",
    "product_category",
    "Title",
    "Description",
    "BulletPoints",
    "Reviews",
    "Rating",
    "pricing",
    "Price",
    "options",
    "Attributes",
    "instruction_text",
    "instruction_attributes",
    "MainImage",
}
GOAL_FIELDS = {
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
}


# --------------------------------------------------------------------------- streaming JSON
@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_stream_readers_match_json_load(tmp_path, chunk):
    records = [
        {"asin": "B01", "pricing": "$1.5", "n": 12345678, "x": [1.25, None, True, 'a"]},']},
        {"asin": "B02", "nested": {"k": [[], {}]}, "u": "caf\u00e9 \u2122"},
        9876543210,
        "tail",
    ]
    array_path = tmp_path / "a.json"
    array_path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    assert list(iter_json_array(array_path, chunk_chars=chunk)) == records
    mapping = {"B01": {"attributes": ["x"]}, "B02": {"attributes": []}, "k3": 1.0e-3}
    object_path = tmp_path / "o.json"
    object_path.write_text(json.dumps(mapping), encoding="utf-8")
    assert dict(iter_json_object(object_path, chunk_chars=chunk)) == mapping


def test_stream_readers_handle_empty_and_reject_bad_files(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(" [ ] ")
    assert list(iter_json_array(empty)) == []
    for text in ['{"a": 1}', "[1, 2", "[1 2]", "[{]"]:
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(JSONStreamError):
            list(iter_json_array(bad, chunk_chars=2))
    with pytest.raises(JSONStreamError, match="expected"):
        list(iter_json_object(empty))


# --------------------------------------------------------------------------- processing
@pytest.mark.parametrize(
    ("raw", "pricing", "tag"),
    [
        ("$10.99", [10.99], "$10.99"),
        ("$19.99$27.99", [19.99, 27.99], "$19.99 to $27.99"),
        ("$1,299.00", [1299.0], "$1299.0"),
        ("$5$6$7", [5.0, 6.0], "$5.0 to $6.0"),
        ("", [100.0], "$100.0"),
        (None, [100.0], "$100.0"),
        ("$", [100.0], "$100.0"),
    ],
)
def test_parse_pricing(raw, pricing, tag):
    assert parse_pricing(raw) == (pricing, tag)


def test_parse_options_lowercases_strips_and_replaces_slashes():
    raw = {"Color": [{"value": " Navy/White ", "image": None}, {"value": "RED"}], "Size": None, "Style": []}
    assert parse_options(raw) == {"color": ["navy | white", "red"], "style": []}
    assert parse_options("") == {}


def _raw(asin, **extra):
    base = {
        "asin": asin,
        "name": f"Thing {asin}",
        "full_description": "d",
        "pricing": "$3.0",
        "images": [],
        "product_category": "A › B",
        "small_description": "one bullet",
        "customization_options": "",
        "category": "c",
        "query": " Things ",
    }
    return {**base, **extra}


def test_process_products_skips_bad_and_duplicate_asins_and_maps_fields():
    raws = [_raw("B1"), _raw("nan"), _raw("B0123456789X"), _raw("B1", name="dup"), _raw("B2")]
    attributes = {
        "B1": {"attributes": ["soft"], "instruction": "i need a soft thing", "instruction_attributes": ["soft"]}
    }
    products = list(process_products(raws, attributes))
    assert [p["asin"] for p in products] == ["B1", "B2"]
    first, second = products
    assert set(first) == PROCESSED_FIELDS
    assert first["Title"] == first["name"] == "Thing B1"
    assert first["BulletPoints"] == ["one bullet"]
    assert first["query"] == "things"
    assert first["Attributes"] == ["soft"] and first["instruction_text"] == "i need a soft thing"
    assert second["Attributes"] == [DUMMY_ATTRIBUTE] and second["instruction_text"] is None
    with pytest.raises(WebShopDataError, match="not a JSON object"):
        list(process_products(["oops"], {}))


def test_ranged_prices_are_drawn_in_range_from_the_seed():
    raws = [_raw(f"B{i}", pricing="$10.0$20.0") for i in range(50)]
    a = build_catalog(raws, {}, seed=3, source="t")
    b = build_catalog(raws, {}, seed=3, source="t")
    c = build_catalog(raws, {}, seed=4, source="t")
    assert a.prices == b.prices != c.prices
    assert all(10.0 <= p <= 20.0 for p in a.prices.values())


def test_price_constraint_draws_from_the_four_bounds_above_the_price():
    rng = np.random.default_rng(0)
    uppers = {price_constraint(12.5, rng)[0] for _ in range(200)}
    assert uppers == {30.0, 40.0, 50.0}  # the larger of two of 20, 30, 40, 50
    upper, text = price_constraint(12.5, np.random.default_rng(1))
    assert text == f", and price lower than {upper:.2f} dollars"
    assert price_constraint(985.0, rng) == (NO_PRICE_LIMIT, "")


def test_missing_data_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(WebShopDataError, match="not a directory"):
        resolve_data_dir(tmp_path / "nope")
    with pytest.raises(WebShopDataError, match="items_shuffle_1000.json"):
        catalog_files(tmp_path, "auto")
    with pytest.raises(WebShopDataError, match="catalog size"):
        catalog_files(tmp_path, "medium")
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    assert resolve_data_dir(None) is None
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    assert resolve_data_dir(None) == tmp_path


# --------------------------------------------------------------------------- official small set
@pytest.fixture(scope="module")
def small_catalog(shared_data):
    return load_catalog(shared_data / "webshop", seed=0)


def test_shared_small_set_loads_1000_products_and_6910_goals(small_catalog):
    assert len(small_catalog) == 1000
    assert all(set(p) == PROCESSED_FIELDS for p in small_catalog.products)
    goals = build_goals(small_catalog, human=False, seed=0)
    assert len(goals) == 6910
    assert all(set(g) == GOAL_FIELDS for g in goals)
    assert len(split_goals(goals, "test")) == 500 and len(split_goals(goals, "train")) == 6410
    instructed = [p for p in small_catalog.products if p["instruction_text"] is not None]
    assert len(instructed) == 415
    # Every goal is one option combination of its product, written into the instruction.
    for goal in goals[:200]:
        product = small_catalog.by_asin[goal["asin"]]
        assert goal["name"] == product["Title"]
        assert goal["instruction_text"].startswith(product["instruction_text"])
        assert sorted(goal["goal_options"]) == sorted(product["options"])
        for name, value in goal["goal_options"].items():
            assert value in product["options"][name] and f"{name}: {value}" in goal["instruction_text"]
        assert goal["price_upper"] > small_catalog.prices[goal["asin"]]
        assert 0 < goal["weight"] <= 1


def test_goal_order_and_prices_are_reproducible(small_catalog, shared_data):
    goals = build_goals(small_catalog, human=False, seed=0)
    again = build_goals(load_catalog(shared_data / "webshop", seed=0), human=False, seed=0)
    assert goals == again
    other_seed = build_goals(load_catalog(shared_data / "webshop", seed=1), human=False, seed=1)
    # The shuffle is the benchmark's fixed one: same goals in the same order, other price draws.
    assert [(g["asin"], g["goal_options"]) for g in goals] == [(g["asin"], g["goal_options"]) for g in other_seed]
    assert [g["price_upper"] for g in goals] != [g["price_upper"] for g in other_seed]


def test_human_goals_from_the_shared_set(shared_data):
    catalog = load_catalog(shared_data / "webshop", seed=0, human_goals=True)
    goals = build_goals(catalog, human=True, seed=0)
    assert 0 < len(goals) <= 13
    assert all(set(g) == GOAL_FIELDS and g["weight"] == 1.0 for g in goals)
    assert all(g["attributes"] and isinstance(g["goal_options"], list) for g in goals)
    assert all(not g["instruction_text"].endswith(".") or "dollars" in g["instruction_text"] for g in goals)


# --------------------------------------------------------------------------- goals API
def test_split_and_goal_validation_errors():
    with pytest.raises(GoalError, match="goal_split"):
        split_goals([], "valid")
    with pytest.raises(GoalError, match="lacks"):
        validate_goal({"instruction_text": "x"})
    with pytest.raises(GoalError, match="dict"):
        validate_goal("buy a hat")
    good = {
        "instruction_text": "i need a hat",
        "attributes": ["warm"],
        "goal_options": {},
        "price_upper": "30",
        "query": "hat",
        "product_category": "a › b",
        "name": "Wool Hat",
    }
    checked = validate_goal(good)
    assert checked["price_upper"] == 30.0 and checked["asin"] is None
    with pytest.raises(GoalError, match="price_upper"):
        validate_goal({**good, "price_upper": "cheap"})


# --------------------------------------------------------------------------- synthetic catalog
def test_synthetic_catalog_is_deterministic_and_in_the_official_format():
    raws, attributes = synthetic_catalog_data(120, seed=5)
    again, _ = synthetic_catalog_data(120, seed=5)
    other, _ = synthetic_catalog_data(120, seed=6)
    assert raws == again and raws != other
    official_raw_keys = {
        "name",
        "full_description",
        "pricing",
        "images",
        "product_category",
        "average_rating",
        "small_description",
        "customization_options",
        "asin",
        "category",
        "query",
        "page",
    }
    assert all(set(r) == official_raw_keys for r in raws)
    assert len({r["asin"] for r in raws}) == 120 and all(len(r["asin"]) == 10 for r in raws)
    assert len({r["category"] for r in raws}) >= 4
    catalog = build_catalog(raws, attributes, seed=0, source="synthetic")
    goals = build_goals(catalog, human=False, seed=0)
    assert len(goals) > 50 and all(set(g) == GOAL_FIELDS for g in goals)
    assert any(len(p["pricing"]) == 2 for p in catalog.products) and any(p["options"] for p in catalog.products)
    with pytest.raises(ValueError, match="positive"):
        next(synthetic_records(0))


def test_written_synthetic_files_load_by_streaming_like_in_memory(tmp_path):
    write_synthetic_data(tmp_path, 60, seed=2)
    loaded = load_catalog(tmp_path, size="full", seed=0)
    raws, attributes = synthetic_catalog_data(60, seed=2)
    in_memory = build_catalog(raws, attributes, seed=0, source="mem")
    assert loaded.products == in_memory.products and loaded.prices == in_memory.prices
    assert len(json.loads((tmp_path / "items_shuffle.json").read_text())) == 60
