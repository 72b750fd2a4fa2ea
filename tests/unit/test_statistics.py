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


# --- bootstrap intervals, Benjamini–Hochberg, comparisons ----------------------------------------

from components.evaluation.statistics import adjust, benjamini_hochberg, bootstrap_ci, compare  # noqa: E402


def test_bootstrap_ci_by_hand_for_two_pairs():
    # differences (0, 1): resampled means are 0, ½, 1 with probabilities ¼, ½, ¼, so the 2.5 % and
    # 97.5 % quantiles of 2000 resamples are 0 and 1
    assert bootstrap_ci([0.0, 0.0], [0.0, 1.0], 2000, 0.95, seed=1) == pytest.approx((0.0, 1.0))
    # 50 % interval: the 25 % and 75 % quantiles of {0, ½, 1} w.p. ¼, ½, ¼ sit at ½ (or on the edge)
    low, high = bootstrap_ci([0.0, 0.0], [0.0, 1.0], 4000, 0.5, seed=1)
    assert 0.0 <= low <= 0.5 <= high <= 1.0


def test_bootstrap_ci_degenerate_and_reproducible():
    assert bootstrap_ci([1.0, 2.0, 3.0], [1.5, 2.5, 3.5], 1000, 0.95, seed=0) == (0.5, 0.5)
    assert bootstrap_ci([1.0], [2.0], 1000, 0.95, seed=0) is None
    a, b = [0.5, 0.7, 0.4, 0.9, 0.2], [0.3, 0.4, 0.35, 0.6, 0.3]
    first = bootstrap_ci(a, b, 1000, 0.95, seed=7)
    assert first == bootstrap_ci(a, b, 1000, 0.95, seed=7)
    mean = sum(y - x for x, y in zip(a, b)) / len(a)
    assert first[0] < mean < first[1]
    assert min(y - x for x, y in zip(a, b)) <= first[0] and first[1] <= max(y - x for x, y in zip(a, b))
    with pytest.raises(ValueError, match="paired"):
        bootstrap_ci([1.0, 2.0], [1.0], 1000, 0.95, seed=0)


def test_benjamini_hochberg_by_hand():
    # sorted p: 0.01, 0.03, 0.04, 0.5 (m = 4) -> p·m/rank: 0.04, 0.06, 0.0533, 0.5; then the running
    # minimum from the largest rank down: 0.04, 0.0533, 0.0533, 0.5
    q = benjamini_hochberg([0.01, 0.04, 0.03, 0.5])
    assert q == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.5])
    # undefined p-values stay undefined and do not count in m (m = 2 here)
    assert benjamini_hochberg([0.01, None, 0.02]) == pytest.approx([0.02, None, 0.02])
    assert benjamini_hochberg([]) == []


def test_compare_and_adjust():
    a, b = [0.5, 0.7, 0.4], [0.3, 0.4, 0.35]
    c = compare("base_vs_tuned", "consistency.gap", a, b, labels=("base", "tuned"), n_resamples=500, confidence=0.9, seed=0)
    assert c.delta == pytest.approx(-(0.2 + 0.3 + 0.05) / 3)  # tuned − base
    assert c.mean_a == pytest.approx(1.6 / 3) and c.mean_b == pytest.approx(1.05 / 3)
    assert c.ci_low <= c.delta <= c.ci_high
    assert c.p_t == pytest.approx(paired_test(a, b).p_value)
    flat = compare(
        "base_vs_tuned", "x", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], labels=("base", "tuned"), n_resamples=500, confidence=0.9, seed=0
    )
    adjusted = adjust([c, flat], alpha=0.2)
    assert adjusted[0].q_bh == pytest.approx(c.p_t)  # m = 1: the flat metric has no p-value
    assert adjusted[0].significant is (c.p_t < 0.2)
    assert adjusted[1].q_bh is None and adjusted[1].significant is False
