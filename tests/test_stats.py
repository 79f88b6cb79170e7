"""The intervals every reported rate carries: Wilson for proportions, bootstrap for means and paired differences."""

from __future__ import annotations

import pytest

from hasp.stats import bootstrap_mean, paired_difference, rate, wilson


def test_wilson_is_sensible_at_the_edges_and_matches_the_textbook_value():
    zero, full = wilson(0, 8), wilson(8, 8)
    assert zero.p == 0 and zero.lo == 0 and 0.3 < zero.hi < 0.33  # 0/8 still allows ~32 %
    assert full.hi == 1 and 0.67 < full.lo < 0.7
    mid = wilson(2, 8)
    assert (round(mid.lo, 3), round(mid.hi, 3)) == (0.071, 0.591)
    assert rate([1.0, 0.0, 0.0, 1.0]).k == 2 and wilson(0, 0).n == 0


def test_bootstrap_mean_is_reproducible_and_brackets_the_mean():
    vals = [1, 0, 0, 1, 1, 0, 0, 0]
    a, b = bootstrap_mean(vals), bootstrap_mean(vals)
    assert a == b and a.mean == pytest.approx(0.375) and a.lo < a.mean < a.hi and a.n == 8
    assert bootstrap_mean([1, 1, 1]).to_dict() == {"mean": 1.0, "n": 3, "ci95": [1.0, 1.0]}
    assert bootstrap_mean([]).n == 0


def test_paired_difference_is_the_bootstrap_of_per_question_differences():
    before, after = [0, 0, 1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0]
    d = paired_difference(before, after)
    assert d == bootstrap_mean([1, 1, 0, 0, 0, 0, 0, 0]) and d.mean == pytest.approx(0.25) and d.lo >= 0
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([0], [0, 1])
