"""Estimates and their standard errors, written once: the mean over prompts or rounds, a share of 0/1 values (the
binomial case), and the paired difference of two runs over the same prompts; and how every face writes one,
`x ± se`. Torch-free.

One convention for what cannot be estimated: None (no values: no mean; fewer than two: no standard error), never
NaN, so that a renderer shows a dash and a JSON writer writes null.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def mean(xs: list[float]) -> float | None:
    """The mean, None without values."""
    return sum(xs) / len(xs) if xs else None


def mean_se(xs: list[float]) -> tuple[float | None, float | None]:
    """Mean and standard error of the mean (sample standard deviation / sqrt(n)); None where undefined."""
    n = len(xs)
    if n == 0:
        return None, None
    m = sum(xs) / n
    if n == 1:
        return m, None
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n)


def share_se(k: int, n: int) -> float | None:
    """The standard error of a share k / n of n 0/1 values (mean_se of those values); None for n < 2."""
    return math.sqrt(k * (n - k) / (n * n * (n - 1))) if n > 1 else None


def cluster_se(terms: list[float]) -> float | None:
    """The standard error of a sum of per-cluster influence terms u_i (a ratio estimator's, clusters such as prompts
    whose rounds are not independent): sqrt(c / (c - 1) sum u_i^2) over c clusters; None for c < 2."""
    c = len(terms)
    return math.sqrt(c / (c - 1) * sum(u * u for u in terms)) if c > 1 else None


def independent_diff_se(a: float | None, b: float | None) -> float:
    """The standard error of a difference of two independent estimates; an SE that is None counts as 0."""
    return math.hypot(a or 0.0, b or 0.0)


def plus_minus(x: float, se: float | None, digits: int = 3, signed: bool = False) -> str:
    """`x ± se` as every table and sentence writes an estimate, `+x ± se` a signed difference; `x` alone without an
    SE."""
    head = f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    return head if se is None else f"{head} ± {se:.{digits}f}"


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error; `n` values had it."""

    mean: float | None
    se: float | None
    n: int

    @classmethod
    def of(cls, xs: list[float]) -> Estimate:
        return cls(*mean_se(xs), len(xs))


def share(k: int, n: int) -> Estimate:
    """k of n as a share with the standard error of the mean of n 0/1 values."""
    return Estimate(k / n, share_se(k, n), n) if n else Estimate(None, None, 0)


@dataclass(frozen=True)
class PairedDiff:
    """Mean over paired prompts of B - A, its standard error, and each side's own mean over the same prompts."""

    mean: float | None
    se: float | None
    n: int
    a: float | None
    b: float | None

    @property
    def diff(self) -> float | None:
        """B - A, as a table's difference column reads it."""
        return self.mean

    @classmethod
    def of(cls, pairs: list[tuple[float, float]]) -> PairedDiff:
        diff, se = mean_se([b - a for a, b in pairs])
        return cls(diff, se, len(pairs), mean([a for a, _ in pairs]), mean([b for _, b in pairs]))
