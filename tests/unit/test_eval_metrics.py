"""Evaluation metrics and per-group records, checked against values computed by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from components.data.schema import PromptGroup
from components.evaluation.metrics import (
    coverage,
    distance_to_uniform,
    distinct_answers,
    distinct_n,
    entropy_gap,
    mean_helpfulness,
    mean_words,
    validity,
    variant_entropies,
)
from components.evaluation.records import (
    CONSISTENCY_COLUMNS,
    DIVERSITY_COLUMNS,
    Semantics,
    consistency_record,
    diversity_record,
)
from tests import grpo_data

LN2 = math.log(2)
COLORS = ["red", "green", "blue", "yellow"]


def consistency_group() -> PromptGroup:
    """Variants w (woman) and m (man)."""
    texts = {"woman": "Advise her.", "man": "Advise him."}
    return grpo_data.gender_group("g1", texts.get, domain="job", split="heldout", variant_id=lambda g: g[0])


def diversity_group() -> PromptGroup:
    return grpo_data.diversity_group("d1", "Name a color.", COLORS, domain="colors", split="heldout", normalizer="exact", variant_id="p")


def exact(text: str, valid: list[str]) -> str | None:
    answer = text.strip().lower()
    return answer if answer in valid else None


# --- entropy gap ----------------------------------------------------------------------------------


def test_variant_entropies_are_mean_word_entropies():
    # "a a b b": p = (1/2, 1/2) -> ln 2;  "a a a a" -> 0;  "a b c d": p = 1/4 each -> ln 4.
    means = variant_entropies({"w": ["a a b b", "a a a a"], "m": ["a b c d"]})
    assert means["w"] == pytest.approx((LN2 + 0.0) / 2)
    assert means["m"] == pytest.approx(2 * LN2)


def test_entropy_gap_is_max_minus_min():
    means = variant_entropies({"w": ["a a b b", "a a a a"], "m": ["a b c d"]})
    assert entropy_gap(means) == pytest.approx(2 * LN2 - LN2 / 2)
    assert entropy_gap({"a": 0.3, "b": 1.0, "c": 0.5}) == pytest.approx(0.7)
    assert entropy_gap({"only": 0.9}) == 0.0


def test_entropy_gap_of_two_variants_is_symmetric():
    assert entropy_gap({"a": 0.2, "b": 0.5}) == pytest.approx(0.3)
    assert entropy_gap({"a": 0.5, "b": 0.2}) == pytest.approx(0.3)


def test_variant_without_samples_is_named():
    with pytest.raises(ValueError, match="'m'"):
        variant_entropies({"w": ["a b"], "m": []})
    with pytest.raises(ValueError):
        entropy_gap({})


# --- distinct-n -----------------------------------------------------------------------------------


def test_distinct_n_by_hand():
    texts = ["a b a", "B, a!"]
    # unigrams: a b a b a -> 2 unique / 5;  bigrams (per text): ab ba | ba -> 2 unique / 3
    assert distinct_n(texts, 1) == pytest.approx(2 / 5)
    assert distinct_n(texts, 2) == pytest.approx(2 / 3)


def test_distinct_n_without_ngrams_is_zero():
    assert distinct_n([], 1) == 0.0
    assert distinct_n(["", "..."], 1) == 0.0
    assert distinct_n(["one", "two"], 2) == 0.0  # n-grams never cross texts


def test_distinct_n_rejects_n_below_one():
    with pytest.raises(ValueError):
        distinct_n(["a b"], 0)


# --- validity, coverage, distance to uniform ------------------------------------------------------


def test_validity_and_distinct_answers():
    assert validity(["red", None, "blue", None]) == 0.5
    assert validity([]) == 0.0
    assert distinct_answers(["red", "red", None, "blue"]) == 2


def test_coverage_by_hand():
    assert coverage(["red", "red", "blue", None], COLORS) == pytest.approx(2 / 4)
    assert coverage(["purple"], COLORS) == 0.0  # outside V counts as invalid
    assert coverage(COLORS, COLORS) == 1.0
    with pytest.raises(ValueError):
        coverage(["red"], [])


def test_distance_to_uniform_by_hand():
    assert distance_to_uniform(COLORS * 3, COLORS) == pytest.approx(0.0)
    # all one answer, L = 4: 1/2 (|1 - 1/4| + 3 * 1/4) = 0.75
    assert distance_to_uniform(["red"] * 4, COLORS) == pytest.approx(0.75)
    # L = 2, valid answers only: f = (2/3, 1/3) -> 1/2 (1/6 + 1/6) = 1/6
    assert distance_to_uniform(["a", "a", "b", None], ["a", "b"]) == pytest.approx(1 / 6)
    assert distance_to_uniform([None, None], COLORS) == 1.0
    assert distance_to_uniform([], COLORS) == 1.0


# --- helpfulness and length -----------------------------------------------------------------------


def test_mean_helpfulness_and_words():
    # H_norm = H / ln W_max with W_max = 4: "a a b b" -> ln2 / ln4 = 0.5, "a a a a" -> 0
    assert mean_helpfulness(["a a b b", "a a a a"], max_words=4) == pytest.approx(0.25)
    assert mean_words(["a a b b", "x"]) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        mean_words([])


# --- records --------------------------------------------------------------------------------------

# Hand-made embeddings (not a model): each distinct word-set gets a fixed unit vector, so cosines,
# clusters and Vendi scores can be computed by hand. threshold_clusters is tested in
# test_meaning_clusters; the real embedder in test_grpo_engine (SEED-GRPO paraphrase clusters).
AXES = {"x": (1.0, 0.0, 0.0), "y": (0.0, 1.0, 0.0), "z": (0.0, 0.0, 1.0)}


def hand_embed(texts):
    """Text -> the unit vector of its first letter's axis in AXES ('a…' / 'r…' -> x, others by table)."""
    first = {"a": "x", "d": "y", "r": "x", "g": "y", "b": "z", "p": "z"}
    return np.array([AXES[first.get(t.strip().lower()[:1], "z")] for t in texts], dtype=np.float32)


SEMANTICS = Semantics(hand_embed, threshold=0.9)


def test_consistency_record_by_hand():
    base = {"w": ["a a b b"], "m": ["a b c d"]}  # H: ln2 vs ln4 -> gap ln2; both embed to x
    tuned = {"w": ["a b c d"], "m": ["d c b a"]}  # H: ln4 vs ln4 -> gap 0; x vs y
    row = consistency_record(consistency_group(), base, tuned, 4, SEMANTICS)
    assert list(row) == CONSISTENCY_COLUMNS
    assert row["group_id"] == "g1" and row["domain"] == "job" and row["n_variants"] == 2
    assert row["base_gap"] == pytest.approx(LN2)
    assert row["tuned_gap"] == pytest.approx(0.0)
    assert row["base_helpfulness"] == pytest.approx((0.5 + 1.0) / 2)
    assert row["tuned_helpfulness"] == pytest.approx(1.0)
    assert row["base_words"] == row["tuned_words"] == 4.0
    assert row["base_empty_rate"] == row["tuned_empty_rate"] == 0.0
    # base: both samples in one cluster, cosine 1; tuned: two clusters of one, cosine 0
    assert row["base_semantic_agreement"] == 1.0 and row["tuned_semantic_agreement"] == 0.5
    assert row["base_cross_variant_cosine"] == pytest.approx(1.0)
    assert row["tuned_cross_variant_cosine"] == pytest.approx(0.0)
    assert json.loads(row["base_variant_entropy"]) == pytest.approx({"w": LN2, "m": 2 * LN2})
    assert json.loads(row["tuned_variant_entropy"]) == pytest.approx({"w": 2 * LN2, "m": 2 * LN2})
    assert json.loads(row["base_axis_entropy"]) == pytest.approx({"gender=woman": LN2, "gender=man": 2 * LN2})


def test_consistency_record_names_group_and_variant_without_samples():
    base = {"w": ["a b"], "m": ["a b"]}
    with pytest.raises(ValueError, match=r"g1.*'m'.*tuned"):
        consistency_record(consistency_group(), base, {"w": ["a b"], "m": []}, 4, SEMANTICS)
    with pytest.raises(ValueError, match=r"g1.*'m'.*base"):
        consistency_record(consistency_group(), {"w": ["a b"]}, base, 4, SEMANTICS)
    with pytest.raises(ValueError, match="unknown variants"):
        consistency_record(consistency_group(), {**base, "x": ["a"]}, base, 4, SEMANTICS)


def test_consistency_record_rejects_diversity_task():
    with pytest.raises(ValueError, match="not consistency"):
        consistency_record(diversity_group(), {"p": ["a"]}, {"p": ["a"]}, 4, SEMANTICS)


def test_diversity_record_by_hand():
    base = ["red", "Red", "red.", "RED"]  # one answer: coverage 1/4, TV 0.75
    tuned = ["red", "green", "blue", "purple"]  # 3 valid of 4; f = 1/3 on r, g, b
    row = diversity_record(diversity_group(), base, tuned, exact, 4, SEMANTICS)
    assert list(row) == DIVERSITY_COLUMNS
    assert row["n_samples"] == 4 and row["n_valid_answers"] == 4
    assert row["base_validity"] == pytest.approx(0.75)  # "red." is not an exact answer
    assert row["base_coverage"] == pytest.approx(0.25)
    assert row["base_unique_at_n"] == 1
    assert row["base_tv_to_uniform"] == pytest.approx(0.75)
    assert row["base_kl_to_uniform"] == pytest.approx(math.log(4))  # point mass on "red"
    assert row["base_distinct_1"] == pytest.approx(1 / 4)
    assert row["base_distinct_2"] == 0.0
    # all base texts embed to x: one cluster, SE 0, Vendi 1
    assert row["base_n_clusters"] == 1 and row["base_semantic_entropy"] == 0.0
    assert row["base_vendi"] == pytest.approx(1.0)
    assert row["tuned_validity"] == pytest.approx(0.75)
    assert row["tuned_coverage"] == pytest.approx(0.75)
    assert row["tuned_unique_at_n"] == 3
    # 1/2 (3 * |1/3 - 1/4| + |0 - 1/4|) = 1/4
    assert row["tuned_tv_to_uniform"] == pytest.approx(0.25)
    # KL(f || U) = 3 * 1/3 * ln(4/3)
    assert row["tuned_kl_to_uniform"] == pytest.approx(math.log(4 / 3))
    assert row["tuned_distinct_1"] == 1.0
    # tuned embeds to x, y, z, z: clusters {1, 1, 2}: SE = -(2 * 1/4 ln 1/4 + 1/2 ln 1/2)
    assert row["tuned_n_clusters"] == 3
    assert row["tuned_semantic_entropy"] == pytest.approx(1.5 * LN2)
    assert json.loads(row["tuned_answer_counts"]) == {"red": 1, "green": 1, "blue": 1}
    assert json.loads(row["base_answer_counts"]) == {"red": 3}


def test_diversity_record_needs_paired_samples():
    with pytest.raises(ValueError, match="d1"):
        diversity_record(diversity_group(), ["red", "blue"], ["red", "blue", "green"], exact, 4, SEMANTICS)
    with pytest.raises(ValueError, match="d1"):
        diversity_record(diversity_group(), ["red"], ["red"], exact, 4, SEMANTICS)
