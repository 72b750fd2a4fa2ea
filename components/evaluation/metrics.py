"""Evaluation metrics over sampled texts and normalised answers: pure functions, no model.

Consistency (information-consistent GRPO, Prabhune, Padmanabhan & Dutta 2025, arXiv:2512.12858):
a model is consistent on a group of equivalent prompt variants when the response entropy H
(`components.rewards.entropy.response_entropy`) does not move between variants.

Diversity (GAPO, Anschel et al. 2025, "Group-Aware Reinforcement Learning for Output Diversity in
Large Language Models", arXiv:2511.12596): on a prompt with a known set V of L valid answers, a
diverse model produces valid answers, covers V, and samples it close to uniformly. Lexical
diversity is distinct-n (Li et al. 2016, "A Diversity-Promoting Objective Function for Neural
Conversation Models", arXiv:1510.03055).

Answers are the output of an answer normaliser: an element of V, or None when the completion maps
onto no valid answer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from statistics import fmean

from components.rewards.entropy import normalized_entropy, response_entropy, words


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


def mean_helpfulness(texts: Sequence[str], max_words: int) -> float:
    """Mean entropy-based helpfulness: (1/N) Σ_i H_norm(o_i), H_norm = min(H / log W_max, 1)."""
    return _mean([normalized_entropy(text, max_words) for text in texts], "helpfulness")


def mean_words(texts: Sequence[str]) -> float:
    """Mean response length in word tokens: (1/N) Σ_i |words(o_i)|."""
    return _mean([len(words(text)) for text in texts], "word counts")
