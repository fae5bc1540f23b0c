"""WebShop's catalog: the official data files, processed exactly as the benchmark does.

A raw product (``items_shuffle*.json``) becomes a record with the field names other WebShop
tools use (``Title``, ``Description``, ``BulletPoints``, ``Price``, ``pricing``, ``options``,
``Attributes``, ...). Each ASIN's attributes and instruction come from ``items_ins_v2*.json``.
Files are read by streaming (`jsonstream`), so the 1.18M-product files load without holding
their parsed text at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from orsd_gym.envs.webshop.jsonstream import iter_json_array, iter_json_object
from orsd_gym.errors import WebShopDataError

DATA_ENV_VAR = "WEBSHOP_DATA"
DUMMY_ATTRIBUTE = "DUMMY_ATTR"
DEFAULT_PRICE = 100.0

#: file names of the official data, per catalog size
CATALOG_FILES = {
    "small": ("items_shuffle_1000.json", "items_ins_v2_1000.json"),
    "full": ("items_shuffle.json", "items_ins_v2.json"),
}
HUMAN_INSTRUCTIONS_FILE = "items_human_ins.json"

_NOT_A_PRICE = re.compile(r"[^\d.]")


@dataclass
class Catalog:
    """Processed products plus what an episode needs to look them up and price them.

    ``prices`` holds one concrete price per ASIN: a ranged price ("$a to $b") is drawn
    uniformly in its range once per load, from the load's seed (as the benchmark does).
    """

    products: list[dict[str, Any]]
    by_asin: dict[str, dict[str, Any]]
    prices: dict[str, float]
    source: str
    human_instructions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.products)


# --------------------------------------------------------------------------- processing
def parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """``"$a"`` -> ([a], "$a"); ``"$a$b"`` -> ([a, b], "$a to $b"); missing -> ([100.0], "$100.0").

    Amounts keep Python's float formatting (``$19.0``), as the benchmark's pages show them.
    Unparseable amounts are skipped; a string without any amount counts as missing.
    """
    amounts: list[float] = []
    if isinstance(pricing, str) and pricing:
        for piece in pricing.split("$")[1:]:
            digits = _NOT_A_PRICE.sub("", piece)
            try:
                amounts.append(float(Decimal(digits)))
            except InvalidOperation:
                continue
    if not amounts:
        return [DEFAULT_PRICE], f"${DEFAULT_PRICE}"
    if len(amounts) == 1:
        return amounts, f"${amounts[0]}"
    amounts = amounts[:2]
    return amounts, f"${amounts[0]} to ${amounts[1]}"


def parse_options(customization_options: Any) -> dict[str, list[str]]:
    """{option name lower-cased: [value stripped, "/" -> " | ", lower-cased]}."""
    options: dict[str, list[str]] = {}
    if not isinstance(customization_options, dict):
        return options
    for name, contents in customization_options.items():
        if contents is None:
            continue
        values = []
        for content in contents:
            value = content.get("value") if isinstance(content, dict) else content
            if value is None:
                continue
            values.append(str(value).strip().replace("/", " | ").lower())
        options[str(name).lower()] = values
    return options


def process_product(raw: dict[str, Any], ins: dict[str, Any] | None) -> dict[str, Any]:
    """Turn one raw product into the benchmark's record. ``ins`` is the ASIN's entry of
    items_ins_v2 (attributes, maybe instruction + instruction_attributes) or None."""
    small = raw.get("small_description")
    bullets = small if isinstance(small, list) else [small if isinstance(small, str) else ""]
    pricing, price_tag = parse_pricing(raw.get("pricing"))
    ins = ins or {}
    record = {
        "asin": raw["asin"],
        "name": raw.get("name", ""),
        "category": raw.get("category", ""),
        "query": str(raw.get("query", "")).lower().strip(),
        "product_category": raw.get("product_category", ""),
        "Title": raw.get("name", ""),
        "Description": raw.get("full_description") or "",
        "BulletPoints": [b if isinstance(b, str) else "" for b in bullets],
        "Reviews": [],
        "Rating": "N.A.",
        "pricing": pricing,
        "Price": price_tag,
        "options": parse_options(raw.get("customization_options")),
        "Attributes": list(ins["attributes"]) if "attributes" in ins else [DUMMY_ATTRIBUTE],
        "instruction_text": ins.get("instruction"),
        "instruction_attributes": ins.get("instruction_attributes"),
    }
    images = raw.get("images")
    record["MainImage"] = images[0] if isinstance(images, list) and images else None
    return record


def process_products(
    raw_products: Iterable[dict[str, Any]], attributes: dict[str, dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """Process raw products in order, skipping ASINs that are "nan", longer than 10
    characters, missing, or already seen (the benchmark's rules)."""
    seen: set[str] = set()
    for raw in raw_products:
        if not isinstance(raw, dict):
            raise WebShopDataError(f"a product record is a {type(raw).__name__}, not a JSON object: {raw!r:.80}")
        asin = raw.get("asin")
        if not isinstance(asin, str) or asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        yield process_product(raw, attributes.get(asin))


def draw_prices(products: list[dict[str, Any]], rng: np.random.Generator) -> dict[str, float]:
    """One concrete price per ASIN; a ranged price uniform between its two amounts (computed
    as Python's ``random.uniform(a, b) = a + (b - a) * U`` does, so a listed "$b$a" works too)."""
    prices = {}
    for product in products:
        pricing = product["pricing"]
        if len(pricing) > 1:
            low, high = pricing[0], pricing[1]
            prices[product["asin"]] = low + (high - low) * float(rng.random())
        else:
            prices[product["asin"]] = pricing[0]
    return prices


def build_catalog(
    raw_products: Iterable[dict[str, Any]],
    attributes: dict[str, dict[str, Any]],
    *,
    seed: int,
    source: str,
    human_instructions: dict[str, list[dict[str, Any]]] | None = None,
) -> Catalog:
    products = list(process_products(raw_products, attributes))
    if not products:
        raise WebShopDataError(f"{source}: no usable products (every ASIN was missing, 'nan', too long or repeated)")
    rng = np.random.default_rng(seed)
    return Catalog(
        products=products,
        by_asin={p["asin"]: p for p in products},
        prices=draw_prices(products, rng),
        source=source,
        human_instructions=dict(human_instructions or {}),
    )


# --------------------------------------------------------------------------- files
def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """``data_dir``, else ``$WEBSHOP_DATA``, else None (use the embedded synthetic catalog)."""
    if data_dir is None:
        data_dir = os.environ.get(DATA_ENV_VAR) or None
    if data_dir is None:
        return None
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise WebShopDataError(
            f"WebShop data_dir {str(path)!r} is not a directory; pass the folder holding "
            f"{CATALOG_FILES['small'][0]} (or set ${DATA_ENV_VAR}), or no data_dir for the synthetic catalog"
        )
    return path


def catalog_files(data_dir: Path, size: str) -> tuple[Path, Path]:
    """The (products, attributes) files for ``size`` in "small" | "full" | "auto" (small if present)."""
    if size not in (*CATALOG_FILES, "auto"):
        raise WebShopDataError(f"catalog size {size!r}; choose 'small', 'full' or 'auto'")
    candidates = ["small", "full"] if size == "auto" else [size]
    for name in candidates:
        products, attributes = (data_dir / f for f in CATALOG_FILES[name])
        if products.is_file() and attributes.is_file():
            return products, attributes
    wanted = " or ".join(" + ".join(CATALOG_FILES[name]) for name in candidates)
    raise WebShopDataError(f"{data_dir} lacks the WebShop catalog files {wanted} (official format)")


def load_attributes(path: Path) -> dict[str, dict[str, Any]]:
    """items_ins_v2: {asin: {"attributes": [...], "instruction"?: str, "instruction_attributes"?: [...]}}."""
    attributes = {}
    for asin, entry in iter_json_object(path):
        if not isinstance(entry, dict):
            raise WebShopDataError(f"{path}: entry for {asin!r} is a {type(entry).__name__}, not an object")
        # Keep only what processing reads, so the full file's entries cost little memory.
        attributes[asin] = {k: entry[k] for k in ("attributes", "instruction", "instruction_attributes") if k in entry}
    return attributes


def load_human_instructions(path: Path) -> dict[str, list[dict[str, Any]]]:
    """items_human_ins: {asin: [{"instruction", "instruction_attributes", "instruction_options", ...}]}."""
    if not path.is_file():
        raise WebShopDataError(f"human_goals=True needs {path} (official WebShop data)")
    return {asin: list(entries) for asin, entries in iter_json_object(path)}


def load_catalog(
    data_dir: str | os.PathLike, *, size: str = "auto", seed: int = 0, human_goals: bool = False
) -> Catalog:
    """Load and process the official files of ``data_dir`` (streamed)."""
    data_dir = Path(data_dir)
    products_path, attributes_path = catalog_files(data_dir, size)
    human = load_human_instructions(data_dir / HUMAN_INSTRUCTIONS_FILE) if human_goals else None
    return build_catalog(
        iter_json_array(products_path),
        load_attributes(attributes_path),
        seed=seed,
        source=str(products_path),
        human_instructions=human,
    )
