"""Means with 95% confidence intervals: what every reported number across seeds or tasks carries."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# Two-sided 95% Student t critical values by degrees of freedom (df > 30: normal approx).
_T95 = dict(
    enumerate(
        (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
        + (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042),
        start=1,
    )
)


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
    t = _T95.get(n - 1, 1.96)
    return Estimate(mean, t * float(np.std(values, ddof=1)) / math.sqrt(n), n, bounds)
