"""The estimates and standard errors of tevviz/engine/analysis/stats.py against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from tevviz.engine.analysis.stats import (
    Estimate,
    PairedDiff,
    cluster_se,
    independent_diff_se,
    mean,
    mean_se,
    plus_minus,
    share,
    share_se,
)


def test_mean_and_its_standard_error_by_hand():
    assert mean([1.0, 2.0, 6.0]) == 3.0
    assert mean([]) is None
    # [2, 4, 9]: mean 5, squared deviations 9 + 1 + 16 = 26, sample variance 13, SE sqrt(13 / 3).
    m, se = mean_se([2.0, 4.0, 9.0])
    assert m == 5.0 and se == pytest.approx(math.sqrt(13 / 3))
    # Constant values: no spread, an SE of exactly 0 (not None, which means "cannot be estimated").
    assert mean_se([4.0, 4.0]) == (4.0, 0.0)
    assert mean_se([7.5]) == (7.5, None) and mean_se([]) == (None, None)


def test_estimate_of_values_carries_their_count():
    assert Estimate.of([2.0, 4.0, 9.0]) == Estimate(5.0, pytest.approx(math.sqrt(13 / 3)), 3)
    assert Estimate.of([3.0]) == Estimate(3.0, None, 1)
    assert Estimate.of([]) == Estimate(None, None, 0)


@pytest.mark.parametrize("k, n", [(1, 4), (0, 5), (5, 5), (2, 3), (1, 2)])
def test_share_se_is_the_se_of_the_mean_of_zero_one_values(k, n):
    _, se = mean_se([1.0] * k + [0.0] * (n - k))
    assert share_se(k, n) == pytest.approx(se)


def test_share_by_hand():
    # 1 of 4: values 1, 0, 0, 0; sum of squared deviations 0.5625 + 3 * 0.0625 = 0.75; / 3 / 4 = 1/16.
    assert share_se(1, 4) == pytest.approx(0.25)
    assert share(1, 4) == Estimate(0.25, pytest.approx(0.25), 4)
    assert share(3, 3) == Estimate(1.0, 0.0, 3)
    assert share_se(1, 1) is None and share_se(0, 0) is None
    assert share(1, 1) == Estimate(1.0, None, 1)
    assert share(0, 0) == Estimate(None, None, 0)


def test_cluster_se_by_hand():
    # Influence terms 0.3, -0.1, -0.2 over c = 3 clusters: sum of squares 0.14, times c / (c - 1) = 1.5: 0.21.
    assert cluster_se([0.3, -0.1, -0.2]) == pytest.approx(math.sqrt(0.21))
    # Two clusters: the small-sample factor is 2, so the terms 0.1 and -0.1 give sqrt(2 * 0.02) = 0.2.
    assert cluster_se([0.1, -0.1]) == pytest.approx(0.2)
    assert cluster_se([0.5]) is None and cluster_se([]) is None


def test_independent_difference_adds_variances_and_a_missing_se_counts_as_zero():
    assert independent_diff_se(0.3, 0.4) == pytest.approx(0.5)
    assert independent_diff_se(None, 0.4) == pytest.approx(0.4)
    assert independent_diff_se(0.3, None) == pytest.approx(0.3)
    assert independent_diff_se(None, None) == 0.0


def test_paired_difference_is_b_minus_a_with_each_sides_mean():
    # Differences B - A: 1, 0, 3; mean 4/3; squared deviations (1 + 16 + 25) / 9 = 42/9; variance 7/3; SE sqrt(7) / 3.
    d = PairedDiff.of([(1.0, 2.0), (3.0, 3.0), (2.0, 5.0)])
    assert d.mean == pytest.approx(4 / 3) and d.diff == d.mean
    assert d.se == pytest.approx(math.sqrt(7) / 3)
    assert (d.n, d.a, d.b) == (3, 2.0, pytest.approx(10 / 3))
    # A pair that went down reads as a negative difference.
    assert PairedDiff.of([(2.0, 1.5)]) == PairedDiff(-0.5, None, 1, 2.0, 1.5)
    assert PairedDiff.of([]) == PairedDiff(None, None, 0, None, None)


def test_plus_minus_writes_digits_sign_and_a_missing_se():
    assert plus_minus(1.23456, 0.0456) == "1.235 ± 0.046"
    assert plus_minus(1.23456, 0.0456, digits=1) == "1.2 ± 0.0"
    assert plus_minus(0.5, 0.1, signed=True) == "+0.500 ± 0.100"
    assert plus_minus(-0.5, 0.1, signed=True) == "-0.500 ± 0.100"
    assert plus_minus(0.0, None, 2, signed=True) == "+0.00"
    assert plus_minus(-2.0, None) == "-2.000"
    # An SE of 0 is an estimate with no spread, written, not dropped as a missing one.
    assert plus_minus(1.0, 0.0, 1) == "1.0 ± 0.0"
