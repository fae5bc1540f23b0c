"""WebShop, re-implemented from its specification (its own code needs Java and is not on PyPI).

Modules, one job each: `jsonstream` (streamed JSON reading), `data` (official files ->
processed catalog), `goals` (synthetic/human goals, split), `synthetic` (the embedded,
generated catalog), `search` (Lucene-like BM25), `pages` (page elements and text renderings),
`reward` (the purchase reward), `shop` (one session's page flow), `env` (the TextEnv).

Importing this package imports none of them (no numpy, spaCy or index building).
"""
