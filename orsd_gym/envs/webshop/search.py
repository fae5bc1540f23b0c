"""WebShop's search engine: BM25 over a Lucene-like English analysis of each product.

The benchmark indexes ``(Title + Description + first bullet point + options text).lower()``
with Pyserini/Lucene (Java): StandardTokenizer, English possessive filter, Lucene's English
stop words, Porter stemming, BM25 with k1=0.9, b=0.4, top 50 hits. This module reproduces that
in numpy, including the two details that decide rankings among close documents:

* Lucene stores each document's length lossily in one byte (`SmallFloat.intToByte4`) and
  scores with the decoded length, against the exact average length;
* ties are broken by index order (lower document number first).

The index is an inverted file (CSR: per term, the doc ids and term frequencies), so a query
costs time proportional to the postings of its terms; `bm25s` was the alternative, but it
offers neither Lucene's length quantization nor a deterministic tie order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (Pyserini's default English analyzer).
LUCENE_ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)
SEARCH_RETURN_N = 50

# UAX#29 word segmentation, as Lucene's StandardTokenizer applies it to Latin text: runs of
# letters/digits/underscore, joined across "." "'" ":" between letters and "." "," ";" "'"
# between digits ("men's", "u.s", "3.5", "1,000" stay one token; "x-large" -> "x", "large").
_TOKEN = re.compile(r"\w+(?:(?:(?<=[^\W\d_])[.:'’](?=[^\W\d_])|(?<=\d)[.,;'’](?=\d))\w+)*")
_POSSESSIVE = re.compile(r"['’][sS]$")


class LuceneEnglishAnalyzer:
    """Tokenize, drop possessive 's, lower-case, remove stop words, Porter-stem."""

    def __init__(self) -> None:
        import Stemmer  # PyStemmer: Snowball's implementation of the original Porter algorithm

        self._stemmer = Stemmer.Stemmer("porter")
        self._stems: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        tokens = []
        for match in _TOKEN.finditer(text):
            token = _POSSESSIVE.sub("", match.group()).lower()
            if not token or token in LUCENE_ENGLISH_STOP_WORDS:
                continue
            stem = self._stems.get(token)
            if stem is None:
                stem = self._stems[token] = self._stemmer.stemWord(token)
            tokens.append(stem)
        return tokens


# Lucene's SmallFloat 4-bit-mantissa codec for document lengths (norms). Lengths below
# NUM_FREE_VALUES are exact; longer ones keep 4 significant bits.
_NUM_FREE_VALUES = 24  # 255 - longToInt4(Integer.MAX_VALUE)


def _long_to_int4(value: int) -> int:
    num_bits = value.bit_length()
    if num_bits < 4:
        return value
    shift = num_bits - 4
    return (value >> shift) & 0x07 | (shift + 1) << 3  # the leading 1 bit is implicit


def _int4_to_long(encoded: int) -> int:
    bits, shift = encoded & 0x07, (encoded >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


def lucene_length(length: int) -> int:
    """The document length Lucene's BM25 scores with: byte4ToInt(intToByte4(length))."""
    if length < _NUM_FREE_VALUES:
        return length
    return _NUM_FREE_VALUES + _int4_to_long(_long_to_int4(length - _NUM_FREE_VALUES))


def product_document(product: dict[str, Any]) -> str:
    """The text WebShop indexes for a product."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullets = product["BulletPoints"]
    first_bullet = bullets[0] if bullets else ""
    return " ".join([product["Title"], product["Description"], first_bullet, option_text]).lower()


@dataclass(frozen=True)
class BM25Params:
    k1: float = 0.9
    b: float = 0.4


class BM25Index:
    """BM25 (Lucene's formula) over token lists; ``search`` returns doc ids best first."""

    def __init__(self, documents: Iterable[Sequence[str]], params: BM25Params = BM25Params()) -> None:
        self.params = params
        vocabulary: dict[str, int] = {}
        term_ids: list[int] = []
        doc_ids: list[int] = []
        freqs: list[int] = []
        lengths: list[int] = []
        for doc_id, tokens in enumerate(documents):
            lengths.append(len(tokens))
            for term, count in Counter(tokens).items():
                term_ids.append(vocabulary.setdefault(term, len(vocabulary)))
                doc_ids.append(doc_id)
                freqs.append(count)
        self.vocabulary = vocabulary
        self.n_docs = len(lengths)
        term_arr = np.asarray(term_ids, dtype=np.int64)
        order = np.argsort(term_arr, kind="stable")  # postings grouped by term, doc ids ascending
        self._doc_ids = np.asarray(doc_ids, dtype=np.int32)[order]
        tf = np.asarray(freqs, dtype=np.float64)[order]
        self._offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(np.bincount(term_arr, minlength=len(vocabulary)), out=self._offsets[1:])
        df = np.diff(self._offsets).astype(np.float64)
        self._idf = np.log1p((self.n_docs - df + 0.5) / (df + 0.5))
        length_arr = np.asarray(lengths, dtype=np.float64)
        avg_length = length_arr.sum() / max(self.n_docs, 1)
        quantized = np.asarray([lucene_length(n) for n in range(int(length_arr.max(initial=0)) + 1)], dtype=np.float64)
        doc_norm = params.k1 * (1 - params.b + params.b * quantized[np.asarray(lengths, dtype=np.int64)] / avg_length)
        # Per posting: tf / (tf + k1 * (1 - b + b * dl / avgdl)); idf is applied at query time.
        self._weights = (tf / (tf + doc_norm[self._doc_ids])).astype(np.float32)

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document (0 where no query term occurs)."""
        scores = np.zeros(self.n_docs, dtype=np.float64)
        for term, count in Counter(query_tokens).items():
            term_id = self.vocabulary.get(term)
            if term_id is None:
                continue
            start, end = self._offsets[term_id], self._offsets[term_id + 1]
            # A repeated query term is a boosted clause in Lucene's bag-of-words query.
            scores[self._doc_ids[start:end]] += count * self._idf[term_id] * self._weights[start:end]
        return scores

    def search(self, query_tokens: Sequence[str], k: int = SEARCH_RETURN_N) -> list[int]:
        """Ids of the top ``k`` matching documents: score descending, then doc id ascending."""
        scores = self.scores(query_tokens)
        matching = np.flatnonzero(scores > 0)
        if len(matching) > k:
            # Keep every document tied with the k-th best, then order exactly.
            threshold = np.partition(scores[matching], len(matching) - k)[len(matching) - k]
            matching = matching[scores[matching] >= threshold]
        order = np.lexsort((matching, -scores[matching]))
        return [int(i) for i in matching[order[:k]]]


class ProductSearchEngine:
    """Search WebShop products by keywords, as the benchmark's search bar does."""

    def __init__(self, products: Sequence[dict[str, Any]], params: BM25Params = BM25Params()) -> None:
        self.analyzer = LuceneEnglishAnalyzer()
        self.asins = [p["asin"] for p in products]
        self.index = BM25Index((self.analyzer(product_document(p)) for p in products), params)

    def search(self, keywords: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the top ``k`` products for ``keywords`` (lower-cased, whitespace-joined)."""
        query = " ".join(keywords.lower().split())
        return [self.asins[i] for i in self.index.search(self.analyzer(query), k)]
