"""Per-group evaluation rows (base vs tuned on the same prompts and seeds).

One `consistency_record` per held-out consistency group and one `diversity_record` per diversity
task, each a row of the per-group tables (`CONSISTENCY_COLUMNS`, `DIVERSITY_COLUMNS`);
`components.evaluation.summary.summarize` turns the two tables into the statistics of `metrics.json`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from components.contracts.errors import UserError
from components.data.schema import PromptGroup
from components.embeddings import threshold_clusters
from components.evaluation.length_control import LengthModel
from components.evaluation.metrics import (
    all_valid,
    axis_gap,
    axis_value_entropies,
    coverage,
    cross_variant_cosine,
    distance_to_uniform,
    distinct_n,
    empty_rate,
    entropy_gap,
    gap_noise_floor,
    js_distance_to_uniform,
    kl_to_uniform,
    mean_helpfulness,
    mean_words,
    n_clusters,
    paraphrase_gap,
    self_bleu,
    semantic_agreement,
    semantic_entropy,
    signed_axis_difference,
    unique_at_n,
    validity,
    variant_entropies,
    vendi_score,
    within_variant_sd,
)
from components.rewards.entropy import EntropyScope, normalized_entropy, response_entropy, words
from components.rewards.instruction import follows, max_sentences, sentence_count

MODELS = ("base", "tuned")

# per-group numbers compared base vs tuned (each also a `base_<name>` / `tuned_<name>` column);
# "gap" is the paper's gap on the headline axis, the first entry the headline of every report
CONSISTENCY_METRICS = (
    "gap", "any_variant_gap", "paraphrase_gap", "signed_diff", "noise_floor", "excess_gap", "within_variant_sd",
    "semantic_agreement", "cross_variant_cosine", "helpfulness", "words", "empty_rate", "truncated_share",
    "sentences", "compliance", "length_controlled_gap",
)  # fmt: skip
DIVERSITY_METRICS = (
    "distinct_1", "distinct_2", "self_bleu", "vendi", "semantic_entropy", "n_clusters",
    "validity", "coverage", "all_valid", "unique_at_n", "tv_to_uniform", "kl_to_uniform", "js_to_uniform",
    "helpfulness", "words", "empty_rate",
)  # fmt: skip
# lower is better for these (used by the report to say which way a change goes)
LOWER_IS_BETTER = {
    "gap", "any_variant_gap", "paraphrase_gap", "excess_gap", "truncated_share", "self_bleu", "length_controlled_gap", "tv_to_uniform", "kl_to_uniform", "js_to_uniform", "empty_rate",
}  # fmt: skip


class EvaluationInputError(UserError, ValueError):
    """The evaluation set or the checkpoint cannot be evaluated (the message says why)."""


def paired_columns(names: Sequence[str]) -> list[str]:
    return [f"{model}_{name}" for name in names for model in MODELS]


CONSISTENCY_COLUMNS = [
    "group_id", "domain", "axis", "n_variants", "n_samples", "max_sentences", *paired_columns(CONSISTENCY_METRICS),
    "base_variant_entropy", "tuned_variant_entropy", "base_axis_entropy", "tuned_axis_entropy",
    "base_axis_helpfulness", "tuned_axis_helpfulness", "base_axis_words", "tuned_axis_words",
]  # fmt: skip
# variant A vs B: metric name in comparisons -> per-group JSON column {"axis=value": mean} (per model)
AXIS_METRICS = {"response_entropy": "axis_entropy", "helpfulness": "axis_helpfulness", "words": "axis_words"}
DIVERSITY_COLUMNS = [
    "group_id", "domain", "n_samples", "n_valid_answers", *paired_columns(DIVERSITY_METRICS),
    "base_answer_counts", "tuned_answer_counts",
]  # fmt: skip

Embedder = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Semantics:
    """How texts become meanings: `embed(texts)` -> unit-norm rows, clusters at cosine >= threshold."""

    embed: Embedder
    threshold: float

    def clusters(self, vectors: np.ndarray) -> list[int]:
        return threshold_clusters(vectors, self.threshold)


def _check_samples(group: PromptGroup, model: str, samples: dict[str, list[str]]) -> None:
    expected = [m.variant_id for m in group.members]
    unknown = sorted(set(samples) - set(expected))
    if unknown:
        raise ValueError(f"group {group.group_id!r}: {model} samples for unknown variants {unknown}")
    for variant_id in expected:
        if not samples.get(variant_id):
            raise ValueError(f"group {group.group_id!r}, variant {variant_id!r}: no {model} samples")


def axis_means(group: PromptGroup, samples: dict[str, list[str]], score: Callable[[str], float]) -> dict[str, float]:
    """Mean score per value of each variant axis: "axis=value" -> mean_{o of members with that value} score(o).

    Samples are pooled over the members sharing the value (a member with more samples weighs more);
    members without the axis in their attributes are left out of it.
    """
    out: dict[str, float] = {}
    for axis in group.variant_axes:
        by_value: dict[str, list[float]] = {}
        for member in group.members:
            value = member.attributes.get(axis)
            if value is not None:
                by_value.setdefault(value, []).extend(score(t) for t in samples[member.variant_id])
        for value, scores in by_value.items():
            out[f"{axis}={value}"] = float(np.mean(scores))
    return out


def axis_entropies(group: PromptGroup, samples: dict[str, list[str]]) -> dict[str, float]:
    """Mean response entropy per value of each variant axis: "axis=value" -> mean H(o) (see `axis_means`)."""
    return axis_means(group, samples, response_entropy)


def headline_axis(group: PromptGroup, axis: str | None) -> str:
    """The axis the paper's gap is measured on: `axis` (eval.gap_axis), or the group's first
    declared variant axis; raises EvaluationInputError naming the group when it lacks the axis."""
    if not group.variant_axes:
        raise EvaluationInputError(f"group {group.group_id!r}: no variant_axes, so no gap between variants to measure")
    chosen = axis or next(iter(group.variant_axes))
    if chosen not in group.variant_axes:
        raise EvaluationInputError(
            f"group {group.group_id!r}: eval.gap_axis {chosen!r} is not one of its variant_axes {sorted(group.variant_axes)}"
        )
    if len(group.variant_axes[chosen]) < 2:
        raise EvaluationInputError(f"group {group.group_id!r}: axis {chosen!r} has fewer than 2 values")
    return chosen


def consistency_record(
    group: PromptGroup,
    base: dict[str, list[str]],
    tuned: dict[str, list[str]],
    max_words: int,
    semantics: Semantics,
    axis: str | None = None,
    truncated: dict[str, float] | None = None,
    entropy_scope: EntropyScope = "answer",
    length_model: LengthModel | None = None,
) -> dict:
    """Row of the per-group consistency table.

    `base` / `tuned` map variant_id -> completions; `axis` is the headline axis (`headline_axis`);
    `truncated` maps model -> share of its samples in this group stopped by max_new_tokens. Per
    model, with H the response entropy and a, b the axis values (paraphrases pooled per value):

    - gap = max_a H̄_a − min_a H̄_a, the paper's |H̄_woman − H̄_man| (Prabhune et al. 2025);
      signed_diff = H̄_A − H̄_B for the first two declared values;
    - noise_floor = √(2/π)·√(s_A²/n_A + s_B²/n_B), the gap that sampling noise alone gives, and
      excess_gap = gap − noise_floor; within_variant_sd = mean sd of H among a variant's samples;
    - any_variant_gap = max_v H̄_v − min_v H̄_v over all variants (axis and phrasing mixed);
      paraphrase_gap = the same between phrasings that share their axis values (NaN: none do);
    - semantic_agreement = share of all the group's samples in the modal meaning cluster;
      cross_variant_cosine = mean embedding cosine between samples of different variants;
    - helpfulness = mean H_norm (the reward's `entropy_scope`), words = mean length, empty_rate = share of empty answers;
    - sentences = mean sentence count, compliance = share of answers that obey every limit their prompt
      states: at most N sentences, at most W words, exactly L list items (`rewards.instruction.follows`;
      max_sentences = N, NaN where no prompt states a limit);
    - length_controlled_gap = the gap on z(o), H made comparable across lengths by `length_model`
      (`evaluation.length_control`; NaN without one);
    - *_variant_entropy = JSON {variant_id: H̄_v}; *_axis_entropy, *_axis_helpfulness,
      *_axis_words = JSON {"axis=value": mean} over every axis (variant A vs B comparisons).
    """
    if group.task != "consistency":
        raise ValueError(f"group {group.group_id!r} is a {group.task!r} task, not consistency")
    if len(group.members) < 2:
        raise ValueError(f"group {group.group_id!r}: a consistency group needs at least 2 variants")
    axis = headline_axis(group, axis)
    value_of = {m.variant_id: m.attributes.get(axis) for m in group.members}
    attributes_of = {m.variant_id: tuple(sorted(m.attributes.items())) for m in group.members}
    limits = {m.variant_id: max_sentences(m.text) for m in group.members}
    stated = [n for n in limits.values() if n is not None]
    row: dict = {
        "group_id": group.group_id, "domain": group.domain, "axis": axis, "n_variants": len(group.members),
        "n_samples": sum(len(base.get(m.variant_id, ())) for m in group.members),
        "max_sentences": min(stated) if stated else math.nan,
    }  # fmt: skip
    for model, samples in (("base", base), ("tuned", tuned)):
        _check_samples(group, model, samples)
        means = variant_entropies(samples)
        try:
            pooled = axis_value_entropies(samples, value_of, group.variant_axes[axis])
        except ValueError as exc:
            raise ValueError(f"group {group.group_id!r}, {model}, axis {axis!r}: {exc}") from None
        texts = [text for m in group.members for text in samples[m.variant_id]]
        variant_of = [m.variant_id for m in group.members for _ in samples[m.variant_id]]
        vectors = semantics.embed(texts)
        gap = axis_gap(pooled)
        floor = gap_noise_floor(pooled)
        row[f"{model}_gap"] = gap
        row[f"{model}_any_variant_gap"] = entropy_gap(means)
        paraphrases = paraphrase_gap(samples, attributes_of)
        row[f"{model}_paraphrase_gap"] = math.nan if paraphrases is None else paraphrases
        row[f"{model}_signed_diff"] = signed_axis_difference(pooled)
        row[f"{model}_noise_floor"] = floor
        row[f"{model}_excess_gap"] = gap - floor
        row[f"{model}_within_variant_sd"] = within_variant_sd(samples)
        row[f"{model}_semantic_agreement"] = semantic_agreement(semantics.clusters(vectors))
        row[f"{model}_cross_variant_cosine"] = cross_variant_cosine(vectors, variant_of)
        row[f"{model}_helpfulness"] = mean_helpfulness(texts, max_words, entropy_scope)
        row[f"{model}_words"] = mean_words(texts)
        row[f"{model}_empty_rate"] = empty_rate(texts)
        row[f"{model}_truncated_share"] = float((truncated or {}).get(model, 0.0))
        row[f"{model}_variant_entropy"] = json.dumps(means, sort_keys=True)
        row[f"{model}_axis_entropy"] = json.dumps(axis_entropies(group, samples), sort_keys=True)
        helpfulness = axis_means(group, samples, lambda text: normalized_entropy(text, max_words, entropy_scope))
        row[f"{model}_axis_helpfulness"] = json.dumps(helpfulness, sort_keys=True)
        lengths = axis_means(group, samples, lambda text: len(words(text)))
        row[f"{model}_axis_words"] = json.dumps(lengths, sort_keys=True)
        counts = {m.variant_id: [sentence_count(text) for text in samples[m.variant_id]] for m in group.members}
        row[f"{model}_sentences"] = float(np.mean([c for cs in counts.values() for c in cs]))
        prompts = {m.variant_id: m.text for m in group.members}
        judged = [ok for v in counts for ok in (follows(text, prompts[v]) for text in samples[v]) if ok is not None]
        row[f"{model}_compliance"] = float(np.mean(judged)) if judged else math.nan
        if length_model is None:
            row[f"{model}_length_controlled_gap"] = math.nan
        else:
            z = axis_value_entropies(
                samples, value_of, group.variant_axes[axis], lambda t: length_model.z(response_entropy(t), len(words(t)))
            )
            row[f"{model}_length_controlled_gap"] = axis_gap(z)
    return {column: row[column] for column in CONSISTENCY_COLUMNS}


def diversity_record(
    group: PromptGroup,
    base: list[str],
    tuned: list[str],
    normalize: Callable[[str, list[str]], str | None],
    max_words: int,
    semantics: Semantics,
    entropy_scope: EntropyScope = "answer",
) -> dict:
    """Row of the per-task diversity table.

    `normalize(text, valid_answers)` maps a completion onto the valid set V (or None). Per model:
    distinct-1/2 and self-BLEU of the texts; Vendi score, semantic entropy and number of meaning
    clusters of their embeddings; validity, coverage, Unique@N, and TV, KL and Jensen–Shannon
    distances to uniform of the normalised answers; helpfulness, words and empty rate (quality
    guard); *_answer_counts = JSON {answer: count} over V (see `metrics`).
    """
    if group.task != "diversity":
        raise ValueError(f"group {group.group_id!r} is a {group.task!r} task, not diversity")
    if not group.valid_answers:
        raise ValueError(f"group {group.group_id!r}: diversity task without valid_answers")
    if len(base) < 2 or len(tuned) < 2:
        raise ValueError(f"group {group.group_id!r}: {len(base)} base and {len(tuned)} tuned samples; diversity needs >= 2 each")
    if len(base) != len(tuned):
        raise ValueError(
            f"group {group.group_id!r}: {len(base)} base vs {len(tuned)} tuned samples "
            "(both models must be sampled on the same prompts and seeds)"
        )
    valid = list(group.valid_answers)
    row: dict = {
        "group_id": group.group_id, "domain": group.domain, "n_samples": len(base),
        "n_valid_answers": len(set(valid)),
    }  # fmt: skip
    for model, texts in (("base", base), ("tuned", tuned)):
        answers = [normalize(text, valid) for text in texts]
        vectors = semantics.embed(texts)
        labels = semantics.clusters(vectors)
        row[f"{model}_distinct_1"] = distinct_n(texts, 1)
        row[f"{model}_distinct_2"] = distinct_n(texts, 2)
        row[f"{model}_self_bleu"] = self_bleu(texts)
        row[f"{model}_vendi"] = vendi_score(vectors)
        row[f"{model}_semantic_entropy"] = semantic_entropy(labels)
        row[f"{model}_n_clusters"] = n_clusters(labels)
        row[f"{model}_validity"] = validity(answers)
        row[f"{model}_coverage"] = coverage(answers, valid)
        row[f"{model}_all_valid"] = all_valid(answers, valid)
        row[f"{model}_unique_at_n"] = unique_at_n(answers)
        row[f"{model}_tv_to_uniform"] = distance_to_uniform(answers, valid)
        row[f"{model}_kl_to_uniform"] = kl_to_uniform(answers, valid)
        row[f"{model}_js_to_uniform"] = js_distance_to_uniform(answers, valid)
        row[f"{model}_helpfulness"] = mean_helpfulness(texts, max_words, entropy_scope)
        row[f"{model}_words"] = mean_words(texts)
        row[f"{model}_empty_rate"] = empty_rate(texts)
        counts = Counter(a for a in answers if a is not None)
        row[f"{model}_answer_counts"] = json.dumps({v: counts[v] for v in valid if counts[v]}, sort_keys=True)
    return {column: row[column] for column in DIVERSITY_COLUMNS}
