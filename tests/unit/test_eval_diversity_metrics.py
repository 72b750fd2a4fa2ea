"""Semantic, lexical and distributional evaluation metrics against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.evaluation.metrics import (
    answer_distribution,
    cross_variant_cosine,
    empty_rate,
    js_distance_to_uniform,
    kl_to_uniform,
    n_clusters,
    self_bleu,
    semantic_agreement,
    semantic_entropy,
    unique_at_n,
    vendi_score,
)

LN2 = math.log(2)
X, Y = np.array([1.0, 0.0]), np.array([0.0, 1.0])
DIAG = np.array([math.sqrt(0.5), math.sqrt(0.5)])


def test_empty_rate():
    assert empty_rate(["", "  ", "...", "fine"]) == pytest.approx(0.75)  # punctuation has no word
    assert empty_rate(["a"]) == 0.0
    with pytest.raises(ValueError):
        empty_rate([])


def test_semantic_agreement_is_the_modal_cluster_share():
    assert semantic_agreement([0, 0, 1, 0]) == pytest.approx(0.75)
    assert semantic_agreement([0, 1, 2, 3]) == pytest.approx(0.25)
    assert semantic_agreement([5]) == 1.0
    with pytest.raises(ValueError):
        semantic_agreement([])


def test_cross_variant_cosine_by_hand():
    # rows: v1 = X, X ; v2 = Y, DIAG. Cross pairs: X·Y = 0 (twice), X·DIAG = √½ (twice) -> mean √½ / 2
    vectors = np.stack([X, X, Y, DIAG])
    assert cross_variant_cosine(vectors, ["v1", "v1", "v2", "v2"]) == pytest.approx(math.sqrt(0.5) / 2)
    # within-variant pairs never count: identical vectors inside v1 do not raise the score
    assert cross_variant_cosine(np.stack([X, X, Y]), ["v1", "v1", "v2"]) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="two different variants|at least two variants"):
        cross_variant_cosine(np.stack([X, Y]), ["v1", "v1"])
    with pytest.raises(ValueError):
        cross_variant_cosine(np.stack([X, Y]), ["v1"])


def test_self_bleu_by_hand():
    same = ["the cat sat on the mat"] * 3
    assert self_bleu(same) == pytest.approx(1.0)
    # hyp "a b c d" vs ref "a b c e": p1..p4 = 3/4, 2/3, 1/2 and (0 matches, exp smoothing) 1/(2·1);
    # BP = 1, BLEU = (3/4 · 2/3 · 1/2 · 1/2)^(1/4) = 2^(-3/4); symmetric, so self-BLEU is the same
    assert self_bleu(["a b c d", "a b c e"]) == pytest.approx(2**-0.75, rel=1e-4)
    assert self_bleu(["alpha beta", "gamma delta"]) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="at least 2"):
        self_bleu(["alone"])


def test_self_bleu_equals_sacrebleu_sentence_bleu():
    """The cached-n-gram computation gives sacrebleu's own sentence BLEU, sample by sample."""
    from statistics import fmean

    from sacrebleu.metrics import BLEU

    rng = np.random.default_rng(7)
    vocab = ["the", "cat", "sat", "on", "mat", "red", "blue", "a", "dog", ",", ".", "isn't", "(x)", "42"]
    cases = [[" ".join(rng.choice(vocab, size=rng.integers(0, 14))) for _ in range(int(rng.integers(2, 9)))] for _ in range(60)]
    cases += [["", "a b"], ["a b c", "a b c", "x"], ["one two", "one two three four", "one"]]  # empty, duplicates, length ties
    bleu = BLEU(effective_order=True)
    for texts in cases:
        expected = fmean(bleu.sentence_score(t, [o for j, o in enumerate(texts) if j != i]).score for i, t in enumerate(texts)) / 100.0
        assert self_bleu(texts) == pytest.approx(expected, rel=1e-12, abs=1e-12), texts


def test_vendi_score_by_hand():
    assert vendi_score(np.stack([X, X, X])) == pytest.approx(1.0)  # K/n has eigenvalues (1, 0, 0)
    assert vendi_score(np.stack([X, Y])) == pytest.approx(2.0)  # (1/2, 1/2): exp(ln 2)
    # X, X, Y: K/3 has eigenvalues 2/3, 1/3, 0 -> exp(H(2/3, 1/3))
    h = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
    assert vendi_score(np.stack([X, X, Y])) == pytest.approx(math.exp(h))
    with pytest.raises(ValueError):
        vendi_score(np.zeros((0, 2)))


def test_semantic_entropy_and_clusters():
    assert semantic_entropy([0, 0, 0, 0]) == 0.0
    assert semantic_entropy([0, 0, 1, 1]) == pytest.approx(LN2)
    assert semantic_entropy([0, 0, 1, 2]) == pytest.approx(1.5 * LN2)  # (1/2, 1/4, 1/4)
    assert n_clusters([0, 0, 1, 2]) == 3
    with pytest.raises(ValueError):
        semantic_entropy([])


COLORS = ["red", "green", "blue", "yellow"]


def test_answer_distribution_and_unique_at_n():
    f = answer_distribution(["red", "red", "blue", None], COLORS)
    assert f == pytest.approx([2 / 3, 0.0, 1 / 3, 0.0])
    assert answer_distribution([None, None], COLORS) is None
    assert unique_at_n(["red", "red", "blue", None]) == 2
    with pytest.raises(ValueError):
        answer_distribution(["red"], [])


def test_kl_to_uniform_by_hand():
    assert kl_to_uniform(COLORS * 2, COLORS) == pytest.approx(0.0)
    assert kl_to_uniform(["red"] * 5, COLORS) == pytest.approx(math.log(4))  # point mass: log L
    # f = (1/2, 1/2, 0, 0): KL = 2 · 1/2 · ln(1/2 · 4) = ln 2
    assert kl_to_uniform(["red", "green", None], COLORS) == pytest.approx(LN2)
    assert kl_to_uniform([None], COLORS) == pytest.approx(math.log(4))  # no valid answer: worst case


def test_js_distance_to_uniform_by_hand():
    assert js_distance_to_uniform(["a", "b"], ["a", "b"]) == pytest.approx(0.0, abs=1e-9)
    # f = (1, 0), U = (1/2, 1/2), M = (3/4, 1/4): JSD = ½ ln(4/3) + ½ · ½ ln(4/3) = ¾ ln(4/3)
    expected = math.sqrt(0.75 * math.log(4 / 3))
    assert js_distance_to_uniform(["a", "a", None], ["a", "b"]) == pytest.approx(expected)
    assert js_distance_to_uniform([None], ["a", "b"]) == pytest.approx(expected)
