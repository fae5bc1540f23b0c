"""Choosing the rubric bundle whose verifier scores agree best with the attempts' rewards."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def rankdata(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n with ties given the average of the ranks they span."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    start = 0
    while start < len(x):
        end = start
        while end + 1 < len(x) and sorted_x[end + 1] == sorted_x[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman rank correlation (ties averaged); None when either side is constant (undefined)."""
    if len(x) != len(y):
        raise ValueError(f"spearman needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return None
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    if denom == 0.0:
        return None
    return float(np.clip((rx * ry).sum() / denom, -1.0, 1.0))


def _validate(scores: Sequence[Sequence[float]], rewards: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    r = np.asarray(rewards, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64).reshape(len(scores), -1) if len(scores) else np.zeros((0, len(r)))
    if r.ndim != 1 or s.shape[1] != len(r):
        raise ValueError(f"scores must be [K][G] with G == len(rewards) == {len(r)}, got shape {s.shape}")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(r))):
        raise ValueError("scores and rewards must be finite (got NaN or inf)")
    return s, r


def bundle_correlations(scores: Sequence[Sequence[float]], rewards: Sequence[float]) -> list[float | None]:
    """Spearman correlation of each bundle's per-attempt scores with the rewards (None: undefined)."""
    s, r = _validate(scores, rewards)
    return [spearman(row, r) for row in s]


def select_bundle(scores: Sequence[Sequence[float]], rewards: Sequence[float], min_corr: float = 0.0) -> int | None:
    """Index of the bundle best aligned with the rewards, or None for "no rubric".

    None when all rewards are equal, when no bundle's scores vary across attempts, or when the
    best correlation is not above ``min_corr`` (a correlation of exactly ``min_corr``, e.g. 0, is
    no evidence of alignment). Ties between bundles go to the lowest index.
    """
    correlations = bundle_correlations(scores, rewards)
    best, best_corr = None, -np.inf
    for index, corr in enumerate(correlations):
        if corr is not None and corr > best_corr:
            best, best_corr = index, corr
    if best is None or best_corr <= min_corr:
        return None
    return best


def select_random_bundle(
    scores: Sequence[Sequence[float]], rewards: Sequence[float], rng: np.random.Generator
) -> int | None:
    """The ablation: a uniformly random bundle, ignoring alignment (None when rewards are all equal)."""
    s, r = _validate(scores, rewards)
    if len(s) == 0 or len(r) < 2 or np.all(r == r[0]):
        return None
    return int(rng.integers(len(s)))
