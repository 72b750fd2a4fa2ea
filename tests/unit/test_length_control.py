"""The length-controlled gap: a gap that falls only because answers got longer does not fall in z;
a gap that falls at the same length does; the estimate from per-value means (arms that kept no
samples) says the same."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from components.evaluation.length_control import LengthModel, fit_length_model, gaps_from_variant_means


def _answers(rng: np.random.Generator, n: int, words: int, shift: float) -> tuple[list[float], list[int]]:
    """Entropies of answers of about `words` words: mean 0.8·log(1 + w), sd 1.2 / log(1 + w)
    (longer answers vary less), plus `shift` nats (a systematic difference between variants)."""
    w = rng.integers(int(words * 0.8), int(words * 1.2) + 1, size=n)
    x = np.log1p(w)
    h = 0.8 * x + shift + rng.normal(0.0, 1.0, size=n) * (1.2 / x)
    return list(h), list(w)


def _gaps(model: LengthModel, groups: list) -> tuple[float, float]:
    """Mean over groups of |mean(A) − mean(B)| on H and on z."""
    raw, controlled = [], []
    for (ha, wa), (hb, wb) in groups:
        raw.append(abs(np.mean(ha) - np.mean(hb)))
        za, zb = [model.z(h, w) for h, w in zip(ha, wa)], [model.z(h, w) for h, w in zip(hb, wb)]
        controlled.append(abs(np.mean(za) - np.mean(zb)))
    return float(np.mean(raw)), float(np.mean(controlled))


def _groups(base_words: int, tuned_words: int, tuned_shift: float, base_shift: float) -> tuple[list, list]:
    """400 groups of 6 + 6 answers per model; variant A's entropies are shifted by `base_shift` / `tuned_shift` nats."""
    rng = np.random.default_rng(0)
    base = [(_answers(rng, 6, base_words, base_shift), _answers(rng, 6, base_words, 0.0)) for _ in range(400)]
    tuned = [(_answers(rng, 6, tuned_words, tuned_shift), _answers(rng, 6, tuned_words, 0.0)) for _ in range(400)]
    return base, tuned


def _study(base_words: int, tuned_words: int, tuned_shift: float, base_shift: float = 0.4) -> tuple[float, float]:
    """Relative reduction of the raw gap and of the length-controlled gap, base → tuned (`_groups`)."""
    base, tuned = _groups(base_words, tuned_words, tuned_shift, base_shift)
    every = [side for pairs in (base, tuned) for pair in pairs for side in pair]
    model = fit_length_model([h for hs, _ in every for h in hs], [w for _, ws in every for w in ws])
    (base_raw, base_z), (tuned_raw, tuned_z) = _gaps(model, base), _gaps(model, tuned)
    return 1 - tuned_raw / base_raw, 1 - tuned_z / base_z


def _per_group_table(base: list, tuned: list) -> pd.DataFrame:
    """The per-group table's columns that an evaluation without samples keeps: per value, mean H and mean words."""
    rows = []
    for i, (b, t) in enumerate(zip(base, tuned)):
        row = {"group_id": f"g{i}", "axis": "gender"}
        for model, ((ha, wa), (hb, wb)) in (("base", b), ("tuned", t)):
            row[f"{model}_axis_entropy"] = json.dumps({"gender=woman": np.mean(ha), "gender=man": np.mean(hb), "tone=warm": 9.0})
            row[f"{model}_axis_words"] = json.dumps({"gender=woman": np.mean(wa), "gender=man": np.mean(wb), "tone=warm": 1.0})
        rows.append(row)
    return pd.DataFrame(rows)


def _means_reduction(base_words: int, tuned_words: int, tuned_shift: float, base_shift: float = 0.4) -> float:
    gaps = gaps_from_variant_means(_per_group_table(*_groups(base_words, tuned_words, tuned_shift, base_shift)))
    return 1 - gaps["tuned_means_lc_gap"].mean() / gaps["base_means_lc_gap"].mean()


def test_a_reduction_bought_with_length_does_not_survive():
    # no systematic difference in either model (the gaps are sampling noise, as on the embedded model);
    # answers 4x longer vary less, so the raw gap falls, the length-controlled one does not
    raw, controlled = _study(base_words=40, tuned_words=160, tuned_shift=0.0, base_shift=0.0)
    assert raw > 0.2
    assert abs(controlled) < 0.08


def test_a_reduction_at_the_same_length_survives():
    raw, controlled = _study(base_words=40, tuned_words=40, tuned_shift=0.0)
    assert raw > 0.3
    assert controlled == pytest.approx(raw, abs=0.1)


def test_the_estimate_from_variant_means_tells_length_from_consistency_as_the_answers_do():
    # only the headline axis's values count (the "tone" value would dominate every gap)
    bought, answers_bought = _means_reduction(40, 160, 0.0, base_shift=0.0), _study(40, 160, 0.0, base_shift=0.0)[1]
    assert abs(bought) < 0.1 and bought == pytest.approx(answers_bought, abs=0.1)
    same_length, (raw, answers_same) = _means_reduction(40, 40, 0.0), _study(40, 40, 0.0)
    assert same_length > 0.3 and same_length == pytest.approx(answers_same, abs=0.1) and same_length == pytest.approx(raw, abs=0.1)


def test_no_estimate_from_means_without_the_per_value_columns():
    table = _per_group_table(*_groups(40, 40, 0.0, 0.4))
    assert gaps_from_variant_means(table.drop(columns=["tuned_axis_words"])) is None
    assert gaps_from_variant_means(table.iloc[:0]) is None
    gaps = gaps_from_variant_means(table)
    assert list(gaps.columns) == ["group_id", "base_means_lc_gap", "tuned_means_lc_gap"] and len(gaps) == 400


def test_fit_recovers_the_location_and_scale():
    rng = np.random.default_rng(1)
    w = rng.integers(5, 400, size=20000)
    x = np.log1p(w)
    h = 1.0 + 0.7 * x + rng.normal(size=len(w)) * (0.9 - 0.1 * x)
    model = fit_length_model(list(h), list(w))
    assert (model.a, model.b) == pytest.approx((1.0, 0.7), abs=0.02)
    for n_words in (10, 50, 300):  # the sd at a length, within 5 %
        x = math.log1p(n_words)
        assert model.c + model.d * x == pytest.approx(0.9 - 0.1 * x, rel=0.05)
    assert model.z(1.0 + 0.7 * math.log1p(50) + (0.9 - 0.1 * math.log1p(50)), 50) == pytest.approx(1.0, abs=0.05)


def test_no_curve_without_enough_answers_or_lengths():
    assert fit_length_model([1.0] * 5, [10] * 5) is None
    assert fit_length_model([float(i) for i in range(20)], [12] * 20) is None  # one length
    assert fit_length_model([2.0] * 20, list(range(20))) is None  # no spread
    with pytest.raises(ValueError, match="20 entropies but 3 word counts"):
        fit_length_model([1.0] * 20, [1, 2, 3])
