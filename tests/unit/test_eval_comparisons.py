"""compare_all: base-vs-tuned and variant A-vs-B families from the per-group tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from components.data.schema import Member, PromptGroup
from components.evaluation.comparisons import COMPARISON_COLUMNS, compare_all, comparisons_frame
from components.evaluation.records import (
    AXIS_METRICS,
    CONSISTENCY_COLUMNS,
    CONSISTENCY_METRICS,
    DIVERSITY_METRICS,
    Semantics,
    consistency_record,
)
from components.evaluation.statistics import bootstrap_ci, paired_test

VARIANT_METRICS = list(AXIS_METRICS)  # response_entropy, helpfulness, words
# per group (woman, man): response entropy, helpfulness (H_norm), words
ENTROPY = [(1.0, 1.2), (2.0, 2.5), (1.5, 1.6), (0.5, 0.9)]
HELPFULNESS = [(0.50, 0.60), (0.70, 0.70), (0.40, 0.55), (0.80, 0.85)]
WORDS = [(10.0, 12.0), (12.0, 15.0), (8.0, 9.0), (10.0, 14.0)]


def consistency_frame() -> pd.DataFrame:
    rows = []
    for i in range(len(ENTROPY)):
        row = {"group_id": f"g{i}", "domain": "job", "n_variants": 2}
        for model, shift in (("base", 0.0), ("tuned", -0.05 * i)):
            for name in CONSISTENCY_METRICS:
                row[f"{model}_{name}"] = 0.1 * i + shift + (0.01 * i * i if model == "tuned" else 0.0)
            for column, values in (("axis_entropy", ENTROPY), ("axis_helpfulness", HELPFULNESS), ("axis_words", WORDS)):
                woman, man = values[i]
                row[f"{model}_{column}"] = json.dumps({"gender=woman": woman + shift, "gender=man": man})
            row[f"{model}_variant_entropy"] = "{}"
        rows.append(row)
    return pd.DataFrame(rows)


def q_values(ps: list[float]) -> list[float]:
    """Benjamini–Hochberg by its definition: q_(i) = min_{j >= i} p_(j) m / j."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out, running = [0.0] * m, 1.0
    for rank in reversed(range(m)):
        running = min(running, ps[order[rank]] * m / (rank + 1))
        out[order[rank]] = running
    return out


def test_compare_all_families_and_bh():
    comparisons = compare_all(consistency_frame(), pd.DataFrame(), alpha=0.05, n_resamples=500, confidence=0.95, seed=3)
    tuned = [c for c in comparisons if c.family == "base_vs_tuned"]
    variants = [c for c in comparisons if c.family == "variants"]
    assert [c.metric for c in tuned] == [f"consistency.{m}" for m in CONSISTENCY_METRICS]
    # per model, per pair of axis values (sorted: man < woman), every variant metric
    assert [(c.model, c.metric, c.a, c.b) for c in variants] == [
        (model, metric, "gender=man", "gender=woman") for model in ("base", "tuned") for metric in VARIANT_METRICS
    ]
    base_entropy = variants[0]
    # woman − man per group: −0.2, −0.5, −0.1, −0.4
    assert base_entropy.delta == pytest.approx(-0.3) and base_entropy.n == 4
    assert base_entropy.p_t == pytest.approx(paired_test([1.2, 2.5, 1.6, 0.9], [1.0, 2.0, 1.5, 0.5]).p_value)
    # BH across the whole variants family (m = 6), separately from base_vs_tuned (m = 6)
    assert [c.q_bh for c in variants] == pytest.approx(q_values([c.p_t for c in variants]))
    assert [c.q_bh for c in tuned] == pytest.approx(q_values([c.p_t for c in tuned]))
    assert all(c.significant == (c.q_bh < 0.05) for c in comparisons)
    table = comparisons_frame(comparisons)
    assert list(table.columns) == COMPARISON_COLUMNS and len(table) == len(comparisons)


def test_variant_words_and_helpfulness_by_hand():
    comparisons = compare_all(consistency_frame(), pd.DataFrame(), alpha=0.05, n_resamples=500, confidence=0.95, seed=3)
    by_key = {(c.model, c.metric): c for c in comparisons if c.family == "variants"}
    words = by_key["base", "words"]
    # d = woman − man = −2, −3, −1, −4: d̄ = −2.5, s_d = √(5/3), t = d̄ / (s_d / 2) = −√15 (3 df)
    assert (words.mean_a, words.mean_b, words.delta) == pytest.approx((12.5, 10.0, -2.5))
    assert words.p_t == pytest.approx(2 * stats.t.sf(math.sqrt(15), 3))
    # Wilcoxon, n = 4, every difference negative and |d| distinct: exact p = 2 · (1/2)^4
    assert words.p_wilcoxon == pytest.approx(0.125)
    # the bootstrap CI lies between the smallest and largest difference and contains d̄
    assert -4.0 <= words.ci_low <= -2.5 <= words.ci_high <= -1.0
    helpfulness = by_key["base", "helpfulness"]
    # d = −0.10, 0, −0.15, −0.05: d̄ = −0.075, s_d² = (0.025² + 0.075² + 0.075² + 0.025²) / 3 = 0.0125 / 3
    assert helpfulness.delta == pytest.approx(-0.075)
    t = -0.075 / (math.sqrt(0.0125 / 3) / 2)
    assert helpfulness.p_t == pytest.approx(2 * stats.t.sf(abs(t), 3))
    # tuned: woman values shifted by −0.05 i, man unchanged -> d̄ shifts by −0.05 · mean(0, 1, 2, 3)
    assert by_key["tuned", "words"].delta == pytest.approx(-2.5 - 0.075)


def test_variants_of_several_axes_and_values_pair_only_groups_having_both():
    base = [
        {"age=old": 1.0, "age=young": 2.0, "gender=man": 1.0, "gender=woman": 1.5},
        {"age=old": 2.0, "age=young": 2.5, "age=mid": 9.0},
        {"age=old": 0.5, "age=young": 1.5, "age=mid": 8.0},
    ]
    frame = pd.DataFrame({"group_id": ["g0", "g1", "g2"], "base_axis_entropy": [json.dumps(e) for e in base], "tuned_axis_entropy": "{}"})
    for name in CONSISTENCY_METRICS:
        frame[f"base_{name}"], frame[f"tuned_{name}"] = 0.0, 1.0
    variants = [c for c in compare_all(frame, pd.DataFrame(), alpha=0.05, n_resamples=200, confidence=0.9, seed=0)
                if c.family == "variants"]  # fmt: skip
    got = {(c.a, c.b): (c.n, c.delta) for c in variants}
    assert list(got) == [
        ("age=mid", "age=old"), ("age=mid", "age=young"), ("age=old", "age=young"), ("gender=man", "gender=woman"),
    ]  # fmt: skip
    assert got["age=mid", "age=old"] == (2, pytest.approx(-7.25))  # g1, g2 only
    assert got["age=old", "age=young"] == (3, pytest.approx(2.5 / 3))  # d = 1, 0.5, 1
    assert got["gender=man", "gender=woman"] == (1, pytest.approx(0.5))
    assert all(c.model == "base" and c.metric == "response_entropy" for c in variants)


def test_tables_without_the_new_axis_columns_still_compare_entropy():
    """A per-group table from before axis helpfulness/words (or with empty cells) compares what it has."""
    frame = consistency_frame().drop(columns=["base_axis_words", "tuned_axis_words"])
    frame["base_axis_helpfulness"] = np.nan  # as read back from a CSV with empty cells
    variants = [c for c in compare_all(frame, pd.DataFrame(), alpha=0.05, n_resamples=200, confidence=0.9, seed=0)
                if c.family == "variants"]  # fmt: skip
    assert [(c.model, c.metric) for c in variants] == [
        ("base", "response_entropy"),
        ("tuned", "response_entropy"),
        ("tuned", "helpfulness"),
    ]


def test_every_bootstrap_uses_the_common_seed():
    """Each CI is bootstrap_ci(a, b, seed): reproducible, independent of the other comparisons, and
    comparisons over the same groups resample the same groups (differences 2d get exactly twice the CI of d)."""
    frame = consistency_frame()
    frame["tuned_words"] = frame["base_words"] + 2 * (frame["tuned_gap"] - frame["base_gap"])
    settings = {"alpha": 0.05, "n_resamples": 300, "confidence": 0.9}
    first = compare_all(frame, pd.DataFrame(), seed=7, **settings)
    assert first == compare_all(frame, pd.DataFrame(), seed=7, **settings)
    gap = next(c for c in first if c.metric == "consistency.gap")
    words = next(c for c in first if c.metric == "consistency.words")
    assert (gap.ci_low, gap.ci_high) == bootstrap_ci(frame["base_gap"], frame["tuned_gap"], 300, 0.9, 7)
    assert (words.ci_low, words.ci_high) == pytest.approx((2 * gap.ci_low, 2 * gap.ci_high))
    diversity = pd.DataFrame(
        [{f"{m}_{name}": float(i + (m == "tuned") * i * i) for name in DIVERSITY_METRICS for m in ("base", "tuned")}
         for i in range(3)]
    )  # fmt: skip
    with_diversity = compare_all(frame, diversity, seed=7, **settings)
    assert [(c.ci_low, c.ci_high) for c in with_diversity if c.metric.startswith("consistency.")] == [
        (c.ci_low, c.ci_high) for c in first if c.metric.startswith("consistency.")
    ]


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


# --- the per-axis columns of a consistency record -------------------------------------------------


def test_consistency_record_axis_helpfulness_and_words_by_hand():
    group = PromptGroup(
        group_id="g1", domain="job", task="consistency", split="heldout",
        members=[
            Member(variant_id="w1", attributes={"gender": "woman"}, text="Advise her."),
            Member(variant_id="w2", attributes={"gender": "woman"}, text="Advise the woman."),
            Member(variant_id="m", attributes={"gender": "man"}, text="Advise him."),
        ],
        variant_axes={"gender": ["woman", "man"]},
    )  # fmt: skip
    semantics = Semantics(lambda texts: np.ones((len(texts), 1), dtype=np.float32), threshold=0.9)
    # W_max = 4: H_norm("a a b b") = ln2/ln4 = 0.5, H_norm("a b c d") = 1, H_norm("a") = 0, H_norm("") = 0
    base = {"w1": ["a a b b", "a"], "w2": ["a b c d"], "m": ["", "a b c d"]}
    tuned = {"w1": ["a b"], "w2": ["a b"], "m": ["a b c d e f g h"]}
    row = consistency_record(group, base, tuned, 4, semantics)
    assert list(row) == CONSISTENCY_COLUMNS
    # woman pools the samples of w1 and w2: (0.5 + 0 + 1) / 3, (4 + 1 + 4) / 3 words
    assert json.loads(row["base_axis_helpfulness"]) == pytest.approx({"gender=woman": 0.5, "gender=man": 0.5})
    assert json.loads(row["base_axis_words"]) == pytest.approx({"gender=woman": 3.0, "gender=man": 2.0})
    # H_norm("a b") = 0.5; eight distinct words saturate at 1
    assert json.loads(row["tuned_axis_helpfulness"]) == pytest.approx({"gender=woman": 0.5, "gender=man": 1.0})
    assert json.loads(row["tuned_axis_words"]) == pytest.approx({"gender=woman": 2.0, "gender=man": 8.0})
    # the pooled means agree with the group-level helpfulness / words when weighted by sample count
    assert (3 * 0.5 + 2 * 0.5) / 5 == pytest.approx(row["base_helpfulness"])
    assert (3 * 3.0 + 2 * 2.0) / 5 == pytest.approx(row["base_words"])


def test_nan_pairs_are_dropped_per_metric():
    # groups g0 and g2 asked in one phrasing: their paraphrase gap is NaN (base, tuned or both)
    frame = consistency_frame()
    frame.loc[0, "base_paraphrase_gap"] = float("nan")
    frame.loc[2, ["base_paraphrase_gap", "tuned_paraphrase_gap"]] = float("nan")
    comparisons = compare_all(frame, pd.DataFrame(), alpha=0.05, n_resamples=200, confidence=0.9, seed=0)
    by_metric = {c.metric: c for c in comparisons if c.family == "base_vs_tuned"}
    paraphrase = by_metric["consistency.paraphrase_gap"]
    # left: g1 (base 0.1, tuned 0.1 − 0.05 + 0.01 = 0.06) and g3 (base 0.3, tuned 0.3 − 0.15 + 0.09 = 0.24)
    assert paraphrase.n == 2
    assert paraphrase.mean_a == pytest.approx(0.2) and paraphrase.mean_b == pytest.approx(0.15)
    assert paraphrase.delta == pytest.approx(-0.05)  # (−0.04 − 0.06) / 2
    # the other metrics keep all four groups
    assert by_metric["consistency.gap"].n == 4
    # a metric undefined in every group: no pairs, nulls rather than NaN
    frame[["base_paraphrase_gap", "tuned_paraphrase_gap"]] = float("nan")
    empty = next(
        c for c in compare_all(frame, pd.DataFrame(), alpha=0.05, n_resamples=200, confidence=0.9, seed=0)
        if c.metric == "consistency.paraphrase_gap"
    )  # fmt: skip
    assert empty.n == 0 and empty.delta is None and empty.p_t is None and empty.q_bh is None
