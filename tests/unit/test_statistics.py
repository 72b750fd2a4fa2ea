"""Paired tests of per-group values against a by-hand t statistic, and degenerate inputs."""

from __future__ import annotations

import math

import pytest

from components.evaluation.statistics import paired_test

BASE = [0.5, 0.7, 0.4]
TUNED = [0.3, 0.4, 0.35]


def by_hand_t(base: list[float], tuned: list[float]) -> float:
    d = [b - t for b, t in zip(base, tuned)]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    return mean / (sd / math.sqrt(n))


def test_t_statistic_and_p_value_match_by_hand():
    result = paired_test(BASE, TUNED)
    t = by_hand_t(BASE, TUNED)  # d = (0.2, 0.3, 0.05): t ≈ 2.5236
    assert result.n == 3
    assert result.t_statistic == pytest.approx(t)
    assert t == pytest.approx(2.5236, abs=1e-4)
    # Student's t with 2 degrees of freedom: two-sided p = 1 - |t| / sqrt(t^2 + 2)
    assert result.p_value == pytest.approx(1 - abs(t) / math.sqrt(t * t + 2))
    # all three differences positive: exact Wilcoxon two-sided p = 2 * (1/2)^3
    assert result.p_value_wilcoxon == pytest.approx(0.25)
    assert result.mean_base == pytest.approx(1.6 / 3)
    assert result.mean_tuned == pytest.approx(1.05 / 3)
    assert result.mean_diff == pytest.approx(0.55 / 3)
    assert result.notes == []


def test_sign_follows_base_minus_tuned():
    assert paired_test(TUNED, BASE).t_statistic == pytest.approx(-by_hand_t(BASE, TUNED))


def test_equal_inputs_give_nulls_with_reasons():
    result = paired_test(BASE, BASE)
    assert result.mean_diff == 0.0
    assert result.t_statistic is None and result.p_value is None
    assert result.p_value_wilcoxon is None
    assert any("zero variance" in note for note in result.notes)
    assert any("all differences are zero" in note for note in result.notes)


def test_constant_nonzero_difference_has_no_t_but_a_wilcoxon_p():
    result = paired_test([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])
    assert result.t_statistic is None and result.p_value is None
    assert result.p_value_wilcoxon == pytest.approx(0.25)
    assert result.mean_diff == pytest.approx(0.5)


def test_single_pair_and_no_pairs():
    one = paired_test([0.4], [0.1])
    assert one.n == 1 and one.mean_diff == pytest.approx(0.3)
    assert one.t_statistic is None and one.p_value is None and one.p_value_wilcoxon is None
    assert any("n=1 < 2" in note for note in one.notes)
    none = paired_test([], [])
    assert none.n == 0 and none.mean_base is None and none.p_value is None and none.notes


def test_no_nan_in_any_result():
    for base, tuned in [(BASE, TUNED), (BASE, BASE), ([1.0, 2.0], [0.0, 1.0]), ([0.2], [0.2])]:
        for value in paired_test(base, tuned).to_dict().values():
            if isinstance(value, float):
                assert math.isfinite(value)


def test_rejects_unequal_lengths_and_non_finite_values():
    with pytest.raises(ValueError, match="equal lengths"):
        paired_test([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="finite"):
        paired_test([0.1, float("nan")], [0.1, 0.2])
