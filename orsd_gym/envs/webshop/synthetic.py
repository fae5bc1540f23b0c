"""A generated WebShop catalog (SYNTHETIC: made up here, not Amazon data).

It lets the env, its tests and the demo run on a machine without the official files. Records
use the official raw formats exactly (``items_shuffle*.json`` products and
``items_ins_v2*.json`` attribute/instruction entries), so they go through the same processing,
search index and goal generation as the real data. Everything is drawn from one seed.

`write_synthetic_data` writes a catalog of any size as official-format files (streamed), which
the benchmarks use to measure loading the 1.18M-product full set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SOURCE_LABEL = "synthetic WebShop catalog (generated, not real products)"
DEFAULT_SYNTHETIC_PRODUCTS = 400
INSTRUCTED_SHARE = 0.4  # about the share of products with an instruction in items_ins_v2_1000


@dataclass(frozen=True)
class ProductType:
    """One kind of product: how it is named, categorised, described and customised."""

    category: str  # WebShop's top-level category ("beauty", "electronics", ...)
    query: str  # the search query the product was collected under
    path: str  # Amazon-style product_category, levels joined by " › "
    nouns: tuple[str, ...]  # product nouns for titles
    qualities: tuple[str, ...]  # adjectives for titles
    attributes: tuple[str, ...]  # WebShop-style attributes ("long lasting", ...)
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option name, possible values)
    price: tuple[float, float]  # price range in dollars


_COLORS = ("Black", "White", "Navy Blue", "Gray", "Red", "Beige", "Dark Green", "Pink", "Light Blue", "Brown")
_APPAREL_SIZES = ("Small", "Medium", "Large", "X-Large", "XX-Large")

PRODUCT_TYPES: tuple[ProductType, ...] = (
    ProductType(
        "beauty",
        "shampoo",
        "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
        ("Shampoo", "Shampoo and Conditioner Set"),
        ("Moisturizing", "Clarifying", "Volumizing", "Herbal"),
        ("sulfate free", "paraben free", "natural ingredients", "dry hair", "cruelty free", "color treated"),
        (
            ("size", ("8 Fl Oz (Pack of 1)", "16 Fl Oz (Pack of 2)", "32 Fl Oz")),
            ("scent", ("Coconut", "Lavender", "Tea Tree")),
        ),
        (6.0, 38.0),
    ),
    ProductType(
        "beauty",
        "lipstick",
        "Beauty & Personal Care › Makeup › Lips › Lipstick",
        ("Lipstick", "Matte Lipstick", "Liquid Lipstick"),
        ("Long Wear", "Velvet", "Creamy", "Waterproof"),
        ("long lasting", "cruelty free", "highly pigmented", "easy apply", "paraben free"),
        (("color", ("Ruby Red", "Nude Beige", "Rose Pink", "Plum", "Coral")),),
        (4.0, 29.0),
    ),
    ProductType(
        "electronics",
        "wireless earbuds",
        "Electronics › Headphones, Earbuds & Accessories › Earbud Headphones",
        ("Wireless Earbuds", "Bluetooth Headphones"),
        ("Noise Cancelling", "Sport", "Compact", "Premium"),
        ("noise cancelling", "long battery life", "water resistant", "fast charging", "hands free"),
        (("color", ("Black", "White", "Midnight Blue")),),
        (19.0, 149.0),
    ),
    ProductType(
        "electronics",
        "hdmi cable",
        "Electronics › Accessories & Supplies › Audio & Video Accessories › Cables",
        ("HDMI Cable", "High Speed HDMI Cord"),
        ("Braided", "Gold Plated", "Ultra Slim"),
        ("high speed", "gold plated", "plug and play", "4k ultra hd", "easy install"),
        (("size", ("3 Feet", "6 Feet", "10 Feet", "15 Feet")), ("style", ("1 Pack", "2 Pack"))),
        (5.0, 25.0),
    ),
    ProductType(
        "electronics",
        "phone case",
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        ("Phone Case", "Protective Cover"),
        ("Shockproof", "Slim Fit", "Clear", "Rugged"),
        ("easy install", "wireless charging", "shock absorption", "scratch resistant"),
        (
            ("color", ("Clear", "Black", "Lavender Purple", "Forest Green")),
            ("size", ("iPhone 13", "iPhone 14", "iPhone 15")),
        ),
        (7.0, 32.0),
    ),
    ProductType(
        "fashion",
        "men's t-shirt",
        "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
        ("T-Shirt", "Crew Neck Tee", "Henley Shirt"),
        ("Classic", "Slim Fit", "Cotton", "Athletic"),
        ("machine wash", "cotton spandex", "short sleeve", "regular fit", "moisture wicking"),
        (("color", _COLORS[:6]), ("size", _APPAREL_SIZES)),
        (9.0, 40.0),
    ),
    ProductType(
        "fashion",
        "women's sneakers",
        "Clothing, Shoes & Jewelry › Women › Shoes › Fashion Sneakers",
        ("Sneakers", "Running Shoes", "Walking Shoes"),
        ("Lightweight", "Breathable", "Slip On", "Casual"),
        ("non slip", "rubber sole", "memory foam", "arch support", "lace up"),
        (("color", ("White", "Black", "Pink", "Gray")), ("size", ("6", "7", "7.5", "8", "9", "10"))),
        (24.0, 110.0),
    ),
    ProductType(
        "food",
        "protein bar",
        "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars",
        ("Protein Bar", "Snack Bar", "Keto Bar"),
        ("Chocolate Chip", "Peanut Butter", "Low Carb", "Crunchy"),
        ("gluten free", "low sugar", "high protein", "non gmo", "plant based", "keto friendly"),
        (("flavor name", ("Chocolate", "Peanut Butter", "Vanilla Almond")), ("size", ("12 Count", "24 Count"))),
        (11.0, 45.0),
    ),
    ProductType(
        "food",
        "ground coffee",
        "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
        ("Ground Coffee", "Coffee Beans"),
        ("Dark Roast", "Medium Roast", "Organic", "Single Origin"),
        ("usda organic", "fair trade", "kosher certified", "caffeine free", "non gmo"),
        (("size", ("12 Ounce", "2 Pound", "5 Pound")),),
        (8.0, 60.0),
    ),
    ProductType(
        "furniture",
        "office chair",
        "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs",
        ("Office Chair", "Desk Chair", "Gaming Chair"),
        ("Ergonomic", "Mesh", "Executive", "Swivel"),
        ("lumbar support", "height adjustable", "easy assemble", "high back", "living room"),
        (("color", ("Black", "Gray", "White", "Blue")),),
        (59.0, 399.0),
    ),
    ProductType(
        "furniture",
        "bookshelf",
        "Home & Kitchen › Furniture › Living Room Furniture › Bookcases",
        ("Bookshelf", "Bookcase", "Storage Shelf"),
        ("5-Tier", "Industrial", "Rustic", "Modern"),
        ("easy assemble", "solid wood", "storage space", "living room", "engineered wood"),
        (("color", ("Rustic Brown", "Black", "White Oak", "Walnut")), ("size", ("3-Tier", "4-Tier", "5-Tier"))),
        (39.0, 249.0),
    ),
)

_BRANDS = (
    "Aurelle",
    "Norvik",
    "Pinebrook",
    "Solstice",
    "Kestrel",
    "Maple & Main",
    "Vantora",
    "Brightwell",
    "Oakline",
    "Lumina",
    "Everpeak",
    "Cobalt Bay",
    "Harbor & Co",
    "Zentro",
    "Willow Lane",
)
_INSTRUCTIONS = (
    "i am looking for {article} {attrs} {noun}",
    "i need {article} {attrs} {noun}",
    "i want to buy {article} {noun} that is {attrs}",
    "find me {article} {attrs} {noun}",
    "i'm looking for {article} {noun} which is {attrs}",
)
_FEATURE_TEMPLATES = (
    "{Attr}: designed for everyday use and built to last",
    "Premium quality {noun_l} from {brand}, {attr}",
    "What you get: one {noun_l}, user guide and our friendly customer service",
    "{Attr} and {attr2}, a great gift for family and friends",
)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _asin(rng: np.random.Generator, taken: set[str]) -> str:
    alphabet = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
    while True:
        asin = "B0" + "".join(rng.choice(alphabet, size=8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _pick(rng: np.random.Generator, items: tuple[Any, ...], k: int) -> list[Any]:
    return [items[i] for i in sorted(rng.choice(len(items), size=min(k, len(items)), replace=False))]


def _price_string(rng: np.random.Generator, low: float, high: float) -> str:
    price = round(float(rng.uniform(low, high)), 2)
    if rng.random() < 0.25:  # some products list a price range, as on Amazon pages
        return f"${price}${round(price * float(rng.uniform(1.1, 1.8)), 2)}"
    return f"${price}"


def synthetic_records(n_products: int, seed: int = 0) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Yield ``n_products`` pairs (raw product, items_ins_v2 entry), deterministic in ``seed``."""
    if not isinstance(n_products, int) or n_products < 1:
        raise ValueError(f"n_products must be a positive int, got {n_products!r}")
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    for index in range(n_products):
        kind = PRODUCT_TYPES[int(rng.integers(len(PRODUCT_TYPES)))]
        brand = _BRANDS[int(rng.integers(len(_BRANDS)))]
        noun = kind.nouns[int(rng.integers(len(kind.nouns)))]
        quality = kind.qualities[int(rng.integers(len(kind.qualities)))]
        attributes = _pick(rng, kind.attributes, int(rng.integers(2, 5)))
        title_attr = attributes[0].title()
        name = f"{brand} {quality} {noun}, {title_attr}"
        features = [
            template.format(
                Attr=attributes[i % len(attributes)].capitalize(),
                attr=attributes[i % len(attributes)],
                attr2=attributes[(i + 1) % len(attributes)],
                noun_l=noun.lower(),
                brand=brand,
            )
            for i, template in enumerate(_FEATURE_TEMPLATES[: int(rng.integers(2, 5))])
        ]
        options = {}
        for option_name, values in kind.options:
            if rng.random() < 0.85:
                chosen = _pick(rng, values, int(rng.integers(2, len(values) + 1)))
                options[option_name.title()] = [{"value": v, "image": None} for v in chosen]
        asin = _asin(rng, taken)
        raw = {
            "name": name,
            "full_description": f"{brand} {noun.lower()}: {quality.lower()} and {', '.join(attributes)}. "
            f"Part of our {kind.query} range.",
            "pricing": _price_string(rng, *kind.price),
            "images": [f"https://example.invalid/images/{asin}.jpg"],
            "product_category": kind.path,
            "average_rating": "",
            "small_description": features,
            "customization_options": options or "",
            "asin": asin,
            "category": kind.category,
            "query": kind.query,
            "page": index // 16 + 1,
        }
        ins: dict[str, Any] = {"attributes": attributes}
        if rng.random() < INSTRUCTED_SHARE:
            wanted = _pick(rng, tuple(attributes), int(rng.integers(1, 3)))
            template = _INSTRUCTIONS[int(rng.integers(len(_INSTRUCTIONS)))]
            attrs_text = " and ".join(wanted)
            article = _article(attrs_text if "{attrs} {noun}" in template else noun.lower())
            ins["instruction"] = template.format(article=article, attrs=attrs_text, noun=noun.lower())
            ins["instruction_attributes"] = wanted
        yield raw, ins


def synthetic_catalog_data(n_products: int = DEFAULT_SYNTHETIC_PRODUCTS, seed: int = 0):
    """(raw products list, {asin: items_ins_v2 entry}) held in memory."""
    raws, attributes = [], {}
    for raw, ins in synthetic_records(n_products, seed):
        raws.append(raw)
        attributes[raw["asin"]] = ins
    return raws, attributes


def write_synthetic_data(directory: str | Path, n_products: int, seed: int = 0, *, size: str = "full") -> Path:
    """Write official-format files (items_shuffle*.json, items_ins_v2*.json) one record at a
    time, so a catalog as large as the real 1.18M set costs no memory to write."""
    from orsd_gym.envs.webshop.data import CATALOG_FILES

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    products_name, attributes_name = CATALOG_FILES[size]
    with (
        (directory / products_name).open("w", encoding="utf-8") as products,
        (directory / attributes_name).open("w", encoding="utf-8") as attributes,
    ):
        products.write("[")
        attributes.write("{")
        for i, (raw, ins) in enumerate(synthetic_records(n_products, seed)):
            separator = "," if i else ""
            products.write(separator + "\n" + json.dumps(raw))
            attributes.write(f"{separator}\n{json.dumps(raw['asin'])}: {json.dumps(ins)}")
        products.write("\n]\n")
        attributes.write("\n}\n")
    return directory
