"""Means with 95% confidence intervals: what every reported number across seeds or tasks carries;
and the Student t quantiles they (and a report's power statements) are built on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np


@dataclass
class Estimate:
    """A mean across seeds with its two-sided 95% t interval, clipped to the metric's range."""

    mean: float
    half_width: float  # of the 95% CI; nan with fewer than 2 seeds
    n: int
    bounds: tuple[float, float] = (-math.inf, math.inf)

    @property
    def low(self) -> float:
        return max(self.mean - self.half_width, self.bounds[0])

    @property
    def high(self) -> float:
        return min(self.mean + self.half_width, self.bounds[1])

    def __str__(self) -> str:
        if self.n < 2 or math.isnan(self.half_width):
            return f"{self.mean:.3f} (n={self.n}: no interval)"
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"

    def as_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "ci95": self.half_width, "n": self.n, "low": self.low, "high": self.high}

    @classmethod
    def from_dict(cls, data: dict[str, Any], bounds: tuple[float, float]) -> Estimate:
        """From `as_dict` or results.json, where a missing mean or interval is null."""
        return cls(number_or_nan(data["mean"]), number_or_nan(data["ci95"]), data["n"], bounds)


def number_or_nan(value: float | None) -> float:
    """A number read back from strict JSON, where one that does not exist is null."""
    return math.nan if value is None else float(value)


def mean_ci(values: list[float], bounds: tuple[float, float] = (-math.inf, math.inf)) -> Estimate:
    """Mean and the two-sided 95% t confidence interval (clipped to ``bounds``)."""
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        return Estimate(math.nan, math.nan, 0, bounds)
    mean = float(np.mean(values))
    if n < 2:
        return Estimate(mean, math.nan, n, bounds)
    t = t_quantile(0.975, n - 1)
    return Estimate(mean, t * float(np.std(values, ddof=1)) / math.sqrt(n), n, bounds)


@lru_cache(maxsize=256)  # reports and the teacher test ask for the same few quantiles many times
def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom, exact to about 1e-10:
    bisection on `t_cdf`. (scipy is not a dependency; this is all the project needs of it.)"""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    # The cdf is monotone: halving the bracket 100 times leaves it far below float resolution.
    for _ in range(100):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return 0.5 * (low + high)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom, from the regularized incomplete
    beta function: P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2)."""
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), by its continued fraction (modified Lentz), which converges fast for
    x < (a + 1) / (a + b + 2); above that, by the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - regularized_incomplete_beta(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (Numerical Recipes' betacf), to relative 1e-15."""
    tiny = 1e-300

    def guarded(value: float) -> float:
        return tiny if abs(value) < tiny else value

    c, d = 1.0, 1.0 / guarded(1.0 - (a + b) * x / (a + 1.0))
    fraction = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 / guarded(1.0 + numerator * d)
            c = guarded(1.0 + numerator / c)
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return fraction
