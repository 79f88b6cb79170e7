"""Intervals for what HASP reports: a rate with its n and 95 % interval, and a paired difference.

Why here: every accuracy the project prints (evaluation cells, val gate, sequential rollouts) is a
proportion over a few dozen questions, where a bare mean says little. One implementation keeps
every table's interval the same kind.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959964


@dataclass(frozen=True)
class Rate:
    """k successes out of n, with the Wilson 95 % interval (sensible at 0/n and n/n, unlike p ± 1.96·se)."""

    k: float
    n: int
    lo: float
    hi: float

    @property
    def p(self) -> float:
        return self.k / self.n if self.n else 0.0

    def __str__(self) -> str:
        return f"{self.p:.3f} [{self.lo:.3f}, {self.hi:.3f}] (n={self.n})"

    def to_dict(self) -> dict[str, float]:
        return {"p": round(self.p, 4), "k": self.k, "n": self.n, "ci95": [round(self.lo, 4), round(self.hi, 4)]}


def wilson(k: float, n: int, z: float = Z95) -> Rate:
    if n <= 0:
        return Rate(0, 0, 0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Rate(k, n, max(0.0, centre - half), min(1.0, centre + half))


def rate(values: Sequence[float]) -> Rate:
    """The Wilson rate of 0/1 outcomes (EM per question)."""
    return wilson(sum(1 for v in values if v > 0), len(values))


@dataclass(frozen=True)
class Difference:
    """A mean (of scores, or of paired differences after − before) and its bootstrap 95 % interval."""

    mean: float
    lo: float
    hi: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}] (n={self.n})"

    def to_dict(self) -> dict[str, float]:
        return {"mean": round(self.mean, 4), "n": self.n, "ci95": [round(self.lo, 4), round(self.hi, 4)]}


def bootstrap_mean(values: Sequence[float], *, resamples: int = 2000, seed: int = 0) -> Difference:
    """Mean of ``values`` with its percentile-bootstrap 95 % interval (fixed seed: reproducible)."""
    vals = [float(v) for v in values]
    n = len(vals)
    if not n:
        return Difference(0.0, 0.0, 0.0, 0)
    rng = random.Random(seed)
    means = sorted(sum(rng.choice(vals) for _ in range(n)) / n for _ in range(resamples))
    return Difference(sum(vals) / n, means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1], n)


def paired_difference(before: Sequence[float], after: Sequence[float], *, resamples: int = 2000,
                      seed: int = 0) -> Difference:
    """``after - before`` per question, resampled with a fixed seed so a report is reproducible."""
    if len(before) != len(after):
        raise ValueError(f"paired samples differ in length: {len(before)} vs {len(after)}")
    return bootstrap_mean([a - b for a, b in zip(after, before)], resamples=resamples, seed=seed)
