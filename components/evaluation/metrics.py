"""Evaluation metrics over sampled texts and normalised answers: pure functions, no model.

Consistency (information-consistent GRPO, Prabhune, Padmanabhan & Dutta 2025, arXiv:2512.12858):
a model is consistent on a group of equivalent prompt variants when the response entropy H
(`components.rewards.entropy.response_entropy`) does not move between variants.

Diversity (GAPO, Anschel et al. 2025, "Group-Aware Reinforcement Learning for Output Diversity in
Large Language Models", arXiv:2511.12596): on a prompt with a known set V of L valid answers, a
diverse model produces valid answers, covers V, and samples it close to uniformly. Lexical
diversity is distinct-n (Li et al. 2016, "A Diversity-Promoting Objective Function for Neural
Conversation Models", arXiv:1510.03055).

Semantic metrics work on unit-norm sentence embeddings (all-MiniLM-L6-v2, `components.embeddings`)
and on meaning clusters (`embeddings.threshold_clusters`): the semantic entropy of Kuhn, Gal &
Farquhar 2023 ("Semantic Uncertainty", arXiv:2302.09664) in its discrete form, and the Vendi score
of Friedman & Dieng 2023 ("The Vendi Score", arXiv:2210.02410). Self-BLEU (Zhu et al. 2018,
"Texygen", arXiv:1802.01886) is sacrebleu's sentence BLEU.

Answers are the output of an answer normaliser: an element of V, or None when the completion maps
onto no valid answer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from statistics import fmean

import numpy as np
from scipy import special
from scipy.spatial import distance

from components.grpo.semantic import semantic_entropy  # noqa: F401  (one definition: SE over meaning clusters, Kuhn et al. 2023)
from components.rewards.entropy import EntropyScope, normalized_entropy, response_entropy, words


def _entropy(weights: np.ndarray) -> float:
    """Shannon entropy −Σ p log p (nats) of the weights normalised to p = w / Σ w; 0 log 0 = 0.

    scipy's elementwise `special.entr` (what `stats.entropy` computes, without its per-call
    argument handling, which dominated the per-group metric time).
    """
    return float(special.entr(weights / weights.sum()).sum())


def _mean(values: Sequence[float], what: str) -> float:
    if not values:
        raise ValueError(f"cannot average {what}: no values")
    return fmean(values)


# --- consistency ----------------------------------------------------------------------------------


def variant_entropies(samples_by_variant: dict[str, list[str]]) -> dict[str, float]:
    """Mean response entropy of each variant: H̄_v = (1/K_v) Σ_k H(o_{v,k}) (nats).

    `samples_by_variant` maps variant_id -> the K_v completions sampled for that variant.
    Raises ValueError naming the variant when it has no samples.
    """
    means: dict[str, float] = {}
    for variant_id, samples in samples_by_variant.items():
        if not samples:
            raise ValueError(f"variant {variant_id!r} has no samples")
        means[variant_id] = fmean(response_entropy(text) for text in samples)
    return means


def entropy_gap(variant_means: dict[str, float]) -> float:
    """Entropy gap of a group: max_v H̄_v − min_v H̄_v (= |H̄_A − H̄_B| for two variants).

    The per-group gap of Prabhune et al. 2025 (arXiv:2512.12858); 0 for a single variant.
    """
    if not variant_means:
        raise ValueError("entropy gap of a group with no variants is undefined")
    values = variant_means.values()
    return max(values) - min(values)


# --- lexical diversity ----------------------------------------------------------------------------


def distinct_n(texts: list[str], n: int) -> float:
    """distinct-n = |unique n-grams| / |n-grams|, counted over all texts (Li et al. 2016).

    N-grams are taken inside each text over `rewards.entropy.words` tokens (never across texts).
    Returns 0.0 when the texts hold no n-gram at all.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ngrams: list[tuple[str, ...]] = []
    for text in texts:
        tokens = words(text)
        ngrams.extend(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    if not ngrams:
        return 0.0
    return len(set(ngrams)) / len(ngrams)


# --- answer diversity (GAPO) ----------------------------------------------------------------------


def _valid_set(valid_answers: Sequence[str]) -> set[str]:
    valid = set(valid_answers)
    if not valid:
        raise ValueError("valid_answers is empty: L = |V| must be >= 1")
    return valid


def validity(answers: Sequence[str | None]) -> float:
    """Share of samples whose answer is valid: |{i : a_i ≠ None}| / N (0.0 when N = 0)."""
    if not answers:
        return 0.0
    return sum(answer is not None for answer in answers) / len(answers)


def distinct_answers(answers: Sequence[str | None]) -> int:
    """Number of distinct valid answers produced: |{a_i} \\ {None}|."""
    return len({answer for answer in answers if answer is not None})


def coverage(answers: Sequence[str | None], valid_answers: Sequence[str]) -> float:
    """Coverage of the valid set: |{a_i} ∩ V| / L (GAPO, arXiv:2511.12596)."""
    valid = _valid_set(valid_answers)
    return len({answer for answer in answers if answer in valid}) / len(valid)


def all_valid(answers: Sequence[str | None], valid_answers: Sequence[str]) -> float:
    """1 if the samples name every valid answer (coverage = 1), else 0: per task, GAPO's "generations
    containing all valid options" (arXiv:2511.12596); its mean over tasks is the rate."""
    return 1.0 if coverage(answers, valid_answers) == 1.0 else 0.0


def distance_to_uniform(answers: Sequence[str | None], valid_answers: Sequence[str]) -> float:
    """Total-variation distance to uniform: TV = ½ Σ_{v∈V} |f_v − 1/L|, in [0, 1 − 1/L].

    f_v = count_v / Σ_u count_u is the empirical distribution over V of the valid answers only
    (answers outside V count as invalid). 1.0 when there is no valid answer at all (no
    distribution to compare). 0 means the model samples V uniformly (GAPO, arXiv:2511.12596).
    """
    valid = _valid_set(valid_answers)
    counts = Counter(answer for answer in answers if answer in valid)
    total = sum(counts.values())
    if total == 0:
        return 1.0
    uniform = 1.0 / len(valid)
    # fsum: exactly rounded, so the result does not depend on the (hash-seeded) set order
    return 0.5 * math.fsum(abs(counts[v] / total - uniform) for v in valid)


# --- helpfulness and length -----------------------------------------------------------------------


def mean_helpfulness(texts: Sequence[str], max_words: int, scope: EntropyScope = "answer") -> float:
    """Mean entropy-based helpfulness: (1/N) Σ_i H_norm(o_i), H_norm = min(H / log W_max, 1), H over
    the whole answer or over sliding W_max-word windows (`scope`, as the reward scores it)."""
    return _mean([normalized_entropy(text, max_words, scope) for text in texts], "helpfulness")


def mean_words(texts: Sequence[str]) -> float:
    """Mean response length in word tokens: (1/N) Σ_i |words(o_i)|."""
    return _mean([len(words(text)) for text in texts], "word counts")


def empty_rate(texts: Sequence[str]) -> float:
    """Share of responses without a single word token: |{i : words(o_i) = ∅}| / N (collapse guard)."""
    return _mean([float(not words(text)) for text in texts], "empty rates")


# --- semantic consistency -------------------------------------------------------------------------


def semantic_agreement(labels: Sequence[int]) -> float:
    """Share of samples in the modal meaning cluster: max_c |{i : c_i = c}| / N.

    `labels` are the meaning clusters of all samples of all variants of one group: 1.0 when every
    variant says the same thing, 1/N when every sample means something else.
    """
    if not labels:
        raise ValueError("semantic agreement of no samples is undefined")
    return max(Counter(labels).values()) / len(labels)


def cross_variant_cosine(vectors: np.ndarray, variant_of: Sequence[str]) -> float:
    """Mean cosine between samples of different variants: mean_{i<j, v(i)≠v(j)} e_i·e_j.

    `vectors` are unit-norm embeddings (one row per sample), `variant_of` the variant of each row.
    Raises ValueError when no pair of samples comes from two different variants.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    variants = np.asarray(variant_of)
    if len(vectors) != len(variants):
        raise ValueError(f"{len(vectors)} embeddings for {len(variants)} variant labels")
    cross = np.triu(variants[:, None] != variants[None, :], k=1)
    if not cross.any():
        raise ValueError("cross-variant cosine needs samples of at least two variants")
    return float((vectors @ vectors.T)[cross].mean())


# --- semantic and lexical diversity ---------------------------------------------------------------


def self_bleu(texts: Sequence[str]) -> float:
    """Self-BLEU = (1/N) Σ_i BLEU(o_i, {o_j : j ≠ i}) / 100, in [0, 1] (Zhu et al. 2018).

    Exactly sacrebleu's `sentence_bleu` (13a tokenizer, exp smoothing, effective order), computed
    from its sufficient statistics: each text is tokenised and cut into n-grams once (sacrebleu's
    `extract_all_word_ngrams`), not once per reference it serves as; the matches of o_i are
    clipped by the largest count of the n-gram in any other sample (sacrebleu's multi-reference
    clip), the reference length is the closest one (shorter on ties), and `BLEU.compute_bleu`
    gives the score. 1 when all samples are the same text, near 0 when they share no n-gram.
    Lower is more diverse. Needs N >= 2.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    if len(texts) < 2:
        raise ValueError(f"self-BLEU needs at least 2 texts, got {len(texts)}")
    bleu = BLEU(effective_order=True)
    order = bleu.max_ngram_order
    grams = [extract_all_word_ngrams(bleu.tokenizer(text.rstrip()), 1, order) for text in texts]
    # per n-gram: the two largest counts over all samples and the sample holding the largest, so
    # the clip max_{j≠i} count_j(g) is the runner-up for the holder and the largest for the others
    top: dict[tuple[str, ...], list[int]] = {}
    for j, (ngrams, _) in enumerate(grams):
        for gram, count in ngrams.items():
            best = top.get(gram)
            if best is None:
                top[gram] = [count, 0, j]
            elif count > best[0]:
                top[gram] = [count, best[0], j]
            elif count > best[1]:
                best[1] = count
    scores = []
    for i, (hyp, hyp_len) in enumerate(grams):
        correct, total = [0] * order, [0] * order
        for gram, count in hyp.items():
            first, second, holder = top[gram]
            total[len(gram) - 1] += count
            correct[len(gram) - 1] += min(count, second if holder == i else first)
        ref_lens = [length for j, (_, length) in enumerate(grams) if j != i]
        ref_len = min(ref_lens, key=lambda length: (abs(hyp_len - length), length))
        score = BLEU.compute_bleu(
            correct, total, hyp_len, ref_len, smooth_method=bleu.smooth_method, smooth_value=bleu.smooth_value,
            effective_order=bleu.effective_order, max_ngram_order=order,
        )  # fmt: skip
        scores.append(score.score)
    return fmean(scores) / 100.0


def vendi_score(vectors: np.ndarray) -> float:
    """Vendi score VS = exp(−Σ_i λ_i log λ_i), λ the eigenvalues of K/N, K_ij = e_i·e_j (Friedman & Dieng 2023).

    The effective number of distinct samples: 1 when all embeddings coincide, N when they are
    orthogonal. Eigenvalues are clipped at 0 (round-off) and 0 log 0 = 0.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    if len(vectors) == 0:
        raise ValueError("Vendi score of no samples is undefined")
    eigenvalues = np.clip(np.linalg.eigvalsh(vectors @ vectors.T / len(vectors)), 0.0, None)
    return float(math.exp(_entropy(eigenvalues)))


def n_clusters(labels: Sequence[int]) -> int:
    """Number of meaning clusters |{c_i}|."""
    return len(set(labels))


# --- distance of the answer distribution to uniform over V ----------------------------------------


def answer_distribution(answers: Sequence[str | None], valid_answers: Sequence[str]) -> np.ndarray | None:
    """f_v = count_v / Σ_u count_u over V (in the order of `valid_answers`); None without a valid answer."""
    valid = list(dict.fromkeys(valid_answers))
    _valid_set(valid)
    counts = Counter(answer for answer in answers if answer is not None)
    total = sum(counts[v] for v in valid)
    if total == 0:
        return None
    return np.array([counts[v] / total for v in valid], dtype=np.float64)


def unique_at_n(answers: Sequence[str | None]) -> int:
    """Unique@N: the number of distinct valid answers among the N samples (= `distinct_answers`)."""
    return distinct_answers(answers)


def kl_to_uniform(answers: Sequence[str | None], valid_answers: Sequence[str]) -> float:
    """KL(f ‖ U) = Σ_v f_v log(f_v · L) (nats), in [0, log L]; 0 log 0 = 0.

    f is `answer_distribution`, U uniform over the L valid answers. Without any valid answer there
    is no f: the worst case log L (that of a point mass) is returned, so collapse to invalid
    answers never looks diverse.
    """
    f = answer_distribution(answers, valid_answers)
    size = len(set(valid_answers))
    if f is None:
        return math.log(size)
    return float(special.rel_entr(f, 1.0 / size).sum())


def js_distance_to_uniform(answers: Sequence[str | None], valid_answers: Sequence[str]) -> float:
    """Jensen–Shannon distance √JSD(f, U), JSD = ½ KL(f ‖ M) + ½ KL(U ‖ M), M = (f + U)/2 (nats).

    scipy `jensenshannon` (natural log); in [0, √log 2]. Without a valid answer: the distance of a
    point mass to U (the worst case), as for `kl_to_uniform`.
    """
    size = len(set(valid_answers))
    f = answer_distribution(answers, valid_answers)
    if f is None:
        f = np.eye(size)[0]
    return float(distance.jensenshannon(f, np.full(size, 1.0 / size)))


# --- the paper's gap on one variant axis, and what sampling noise alone would give ---------------


def axis_value_entropies(
    samples_by_variant: dict[str, list[str]],
    value_of: dict[str, str],
    values: Sequence[str],
    score: Callable[[str], float] = response_entropy,
) -> dict[str, list[float]]:
    """Response entropies H(o) of every sample (or another per-answer `score`), pooled per value
    of one variant axis.

    `value_of` maps variant_id -> the variant's value on the axis (paraphrases of one value are
    pooled); the result follows the order of `values`. Raises ValueError naming a value without
    any sample.
    """
    pooled: dict[str, list[float]] = {value: [] for value in values}
    for variant_id, texts in samples_by_variant.items():
        value = value_of.get(variant_id)
        if value in pooled:
            pooled[value].extend(score(text) for text in texts)
    empty = [value for value, scores in pooled.items() if not scores]
    if empty:
        raise ValueError(f"axis value(s) {empty} have no samples")
    return pooled


def axis_gap(pooled: dict[str, list[float]]) -> float:
    """The paper's gap on one axis: max_a H̄_a − min_a H̄_a over the axis values a, H̄_a the mean
    entropy of all samples of the variants with value a (= |H̄_woman − H̄_man| for two values;
    Prabhune et al. 2025, arXiv:2512.12858)."""
    means = [fmean(scores) for scores in pooled.values()]
    return max(means) - min(means)


def signed_axis_difference(pooled: dict[str, list[float]]) -> float:
    """H̄_A − H̄_B for the first two axis values A, B (in the group's declared order): a systematic
    bias shows as a mean of this over groups that differs from 0."""
    first, second = list(pooled.values())[:2]
    return fmean(first) - fmean(second)


def _sd(values: Sequence[float]) -> float:
    """Sample standard deviation (n − 1); 0 for a single value (a deterministic answer)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def gap_noise_floor(pooled: dict[str, list[float]]) -> float:
    """Expected gap when all values share one distribution: √(2/π) · √(s_A²/n_A + s_B²/n_B).

    E|X| = √(2/π)·σ for X ~ N(0, σ²): the gap that sampling noise alone gives, from the group's own
    spread s_a (sample sd of the value's entropies) and sample counts n_a. With more than two
    values: the largest such pairwise floor (a lower bound of the expected range).
    """
    se2 = [_sd(scores) ** 2 / len(scores) for scores in pooled.values()]
    return math.sqrt(2 / math.pi) * max(math.sqrt(a + b) for i, a in enumerate(se2) for b in se2[i + 1 :])


def within_variant_sd(samples_by_variant: dict[str, list[str]]) -> float:
    """Mean over variants of the sample sd of H(o) among that variant's samples (sampling spread)."""
    return fmean(_sd([response_entropy(text) for text in texts]) for texts in samples_by_variant.values())


def paraphrase_gap(samples_by_variant: dict[str, list[str]], attributes_of: dict[str, tuple]) -> float | None:
    """Gap between paraphrases: mean over the attribute combinations held by several variants
    (the same axis values, other phrasings) of max − min of their mean entropies H̄_v; None when
    no two variants share all their axis values."""
    by_attributes: dict[tuple, list[float]] = {}
    for variant_id, texts in samples_by_variant.items():
        by_attributes.setdefault(attributes_of[variant_id], []).append(fmean(response_entropy(t) for t in texts))
    ranges = [max(means) - min(means) for means in by_attributes.values() if len(means) > 1]
    return fmean(ranges) if ranges else None
