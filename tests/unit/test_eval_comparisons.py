"""compare_all: base-vs-tuned and variant A-vs-B families from the per-group tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from components.evaluation.comparisons import COMPARISON_COLUMNS, compare_all, comparisons_frame
from components.evaluation.records import CONSISTENCY_METRICS, DIVERSITY_METRICS
from components.evaluation.statistics import paired_test


def consistency_frame() -> pd.DataFrame:
    rows = []
    for i, (woman, man) in enumerate([(1.0, 1.2), (2.0, 2.5), (1.5, 1.6), (0.5, 0.9)]):
        row = {"group_id": f"g{i}", "domain": "job", "n_variants": 2}
        for model, shift in (("base", 0.0), ("tuned", -0.05 * i)):
            for name in CONSISTENCY_METRICS:
                row[f"{model}_{name}"] = 0.1 * i + shift + (0.01 * i * i if model == "tuned" else 0.0)
            row[f"{model}_axis_entropy"] = json.dumps({"gender=woman": woman + shift, "gender=man": man})
            row[f"{model}_variant_entropy"] = "{}"
        rows.append(row)
    return pd.DataFrame(rows)


def test_compare_all_families_and_bh():
    frame = consistency_frame()
    comparisons = compare_all(frame, pd.DataFrame(), alpha=0.05, n_resamples=500, confidence=0.95, seed=3)
    tuned = [c for c in comparisons if c.family == "base_vs_tuned"]
    variants = [c for c in comparisons if c.family == "variants"]
    assert [c.metric for c in tuned] == [f"consistency.{m}" for m in CONSISTENCY_METRICS]
    assert {(c.model, c.a, c.b) for c in variants} == {
        ("base", "gender=man", "gender=woman"), ("tuned", "gender=man", "gender=woman"),
    }  # fmt: skip
    base_variant = next(c for c in variants if c.model == "base")
    # woman − man per group: −0.2, −0.5, −0.1, −0.4
    assert base_variant.delta == pytest.approx(-0.3)
    assert base_variant.p_t == pytest.approx(paired_test([1.2, 2.5, 1.6, 0.9], [1.0, 2.0, 1.5, 0.5]).p_value)
    # BH within the variants family: m = 2
    ps = sorted(c.p_t for c in variants)
    q_expected = [min(ps[0] * 2, ps[1]), ps[1]]
    assert sorted(c.q_bh for c in variants) == pytest.approx(q_expected)
    table = comparisons_frame(comparisons)
    assert list(table.columns) == COMPARISON_COLUMNS and len(table) == len(comparisons)


def test_compare_all_includes_diversity_metrics():
    row = {"group_id": "d", "domain": "c", "n_samples": 3, "n_valid_answers": 4}
    rows = []
    for i in range(3):
        r = dict(row, group_id=f"d{i}")
        for name in DIVERSITY_METRICS:
            r[f"base_{name}"], r[f"tuned_{name}"] = float(i), float(i) + 0.5
        rows.append(r)
    comparisons = compare_all(pd.DataFrame(), pd.DataFrame(rows), alpha=0.05, n_resamples=200, confidence=0.9, seed=0)
    assert [c.metric for c in comparisons] == [f"diversity.{m}" for m in DIVERSITY_METRICS]
    assert all(c.delta == pytest.approx(0.5) and c.ci_low == c.ci_high == pytest.approx(0.5) for c in comparisons)
    assert all(c.p_t is None for c in comparisons)  # constant differences: t undefined
