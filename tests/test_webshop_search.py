"""Search: the Lucene-like analyzer, Lucene's BM25 (with its length norms), WebShop's documents."""

from __future__ import annotations

import math

import pytest

from orsd_gym.envs.webshop.search import (
    BM25Index,
    BM25Params,
    LuceneEnglishAnalyzer,
    ProductSearchEngine,
    lucene_length,
    product_document,
)


def test_analyzer_tokenizes_drops_stop_words_and_stems():
    analyze = LuceneEnglishAnalyzer()
    assert analyze("The Men's Running Shoes are for walking and hiking") == ["men", "run", "shoe", "walk", "hike"]
    assert analyze("X-Large 3.5 inch, 1,000 pcs: B09QQLDJ93") == [
        "x",
        "larg",
        "3.5",
        "inch",
        "1,000",
        "pc",
        "b09qqldj93",
    ]
    assert analyze("") == [] and analyze("a an the !!!") == []


def test_lucene_length_norm_is_exact_for_short_docs_and_lossy_after():
    assert [lucene_length(n) for n in (0, 1, 23, 24, 40)] == [0, 1, 23, 24, 40]
    assert lucene_length(41) == 40 and lucene_length(100) == 96 and lucene_length(1000) == 984
    lengths = [lucene_length(n) for n in range(2000)]
    assert lengths == sorted(lengths) and all(q <= n for n, q in enumerate(lengths))


def _brute_force_bm25(docs, query, k1=0.9, b=0.4):
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    scores = []
    for doc in docs:
        score = 0.0
        for term in query:
            df = sum(term in d for d in docs)
            tf = doc.count(term)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf / (tf + k1 * (1 - b + b * lucene_length(len(doc)) / avgdl))
        scores.append(score)
    return scores


def test_bm25_matches_lucenes_formula_and_breaks_ties_by_doc_order():
    docs = [["red", "shoe"], ["blue", "shoe", "shoe"], ["red", "hat"] * 30, ["green", "sock"], ["red", "shoe"]]
    index = BM25Index(docs, BM25Params(k1=0.9, b=0.4))
    for query in (["red"], ["shoe", "red"], ["shoe", "shoe"], ["sock", "hat", "red"]):
        assert index.scores(query) == pytest.approx(_brute_force_bm25(docs, query), rel=1e-6)
    expected = _brute_force_bm25(docs, ["red", "shoe"])
    ranked = sorted((i for i in range(len(docs)) if expected[i] > 0), key=lambda i: (-expected[i], i))
    assert index.search(["red", "shoe"]) == ranked
    assert ranked[:2] == [0, 4]  # docs 0 and 4 tie: index order
    assert index.search(["red", "shoe"], k=2) == [0, 4]
    assert index.search(["unknown"]) == [] and index.search([]) == []


def test_search_returns_at_most_50_and_keeps_ties_stable():
    docs = [["lamp"]] * 80
    index = BM25Index(docs)
    assert index.search(["lamp"]) == list(range(50))


def test_product_document_is_title_description_first_bullet_and_options():
    product = {
        "Title": "Cozy Mug",
        "Description": "Big.",
        "BulletPoints": ["Holds 12 oz", "Dishwasher safe"],
        "options": {"color": ["red", "blue"], "size": ["12 oz"]},
    }
    assert product_document(product) == "cozy mug big. holds 12 oz color: red, blue, and size: 12 oz"
    assert product_document({**product, "BulletPoints": []}).startswith("cozy mug big.  color")


@pytest.fixture(scope="module")
def engine(shared_data):
    from orsd_gym.envs.webshop.data import load_catalog

    catalog = load_catalog(shared_data / "webshop", seed=0)
    return catalog, ProductSearchEngine(catalog.products)


def test_titles_find_their_product_on_the_shared_set(engine):
    catalog, search = engine
    products = catalog.products[::50]
    ranks = []
    for product in products:
        hits = search.search(product["Title"])
        assert len(hits) <= 50
        ranks.append(hits.index(product["asin"]) if product["asin"] in hits else None)
    assert all(rank is not None for rank in ranks)
    assert sum(rank == 0 for rank in ranks) >= 0.8 * len(ranks)
    assert search.search("zzqx unfindable") == []
    assert search.search("SHOES") == search.search("  shoes ")  # lower-cased, whitespace-normalised
