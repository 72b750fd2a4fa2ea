"""Per-group evaluation rows (base vs tuned on the same prompts and seeds) and their summary.

One `consistency_record` per held-out consistency group and one `diversity_record` per diversity
task; `summarize` turns the two tables into the content of `metrics.json`. Group-level means
weigh every group equally (a group's value is itself a mean over its samples).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from components.data.schema import PromptGroup
from components.embeddings import threshold_clusters
from components.evaluation.metrics import (
    coverage,
    cross_variant_cosine,
    distance_to_uniform,
    distinct_n,
    empty_rate,
    entropy_gap,
    js_distance_to_uniform,
    kl_to_uniform,
    mean_helpfulness,
    mean_words,
    n_clusters,
    self_bleu,
    semantic_agreement,
    semantic_entropy,
    unique_at_n,
    validity,
    variant_entropies,
    vendi_score,
)
from components.evaluation.statistics import paired_test
from components.rewards.entropy import normalized_entropy, response_entropy, words

MODELS = ("base", "tuned")

# per-group numbers compared base vs tuned (each also a `base_<name>` / `tuned_<name>` column)
CONSISTENCY_METRICS = ("gap", "semantic_agreement", "cross_variant_cosine", "helpfulness", "words", "empty_rate")
DIVERSITY_METRICS = (
    "distinct_1", "distinct_2", "self_bleu", "vendi", "semantic_entropy", "n_clusters",
    "validity", "coverage", "unique_at_n", "tv_to_uniform", "kl_to_uniform", "js_to_uniform",
    "helpfulness", "words", "empty_rate",
)  # fmt: skip
# lower is better for these (used by the report to say which way a change goes)
LOWER_IS_BETTER = {"gap", "self_bleu", "tv_to_uniform", "kl_to_uniform", "js_to_uniform", "empty_rate"}


def _paired(names: Sequence[str]) -> list[str]:
    return [f"{model}_{name}" for name in names for model in MODELS]


CONSISTENCY_COLUMNS = [
    "group_id", "domain", "n_variants", *_paired(CONSISTENCY_METRICS),
    "base_variant_entropy", "tuned_variant_entropy", "base_axis_entropy", "tuned_axis_entropy",
    "base_axis_helpfulness", "tuned_axis_helpfulness", "base_axis_words", "tuned_axis_words",
]  # fmt: skip
# variant A vs B: metric name in comparisons -> per-group JSON column {"axis=value": mean} (per model)
AXIS_METRICS = {"response_entropy": "axis_entropy", "helpfulness": "axis_helpfulness", "words": "axis_words"}
DIVERSITY_COLUMNS = [
    "group_id", "domain", "n_samples", "n_valid_answers", *_paired(DIVERSITY_METRICS),
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
        raise ValueError(
            f"group {group.group_id!r}: {model} samples for unknown variants {unknown}"
        )
    for variant_id in expected:
        if not samples.get(variant_id):
            raise ValueError(
                f"group {group.group_id!r}, variant {variant_id!r}: no {model} samples"
            )


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


def consistency_record(
    group: PromptGroup,
    base: dict[str, list[str]],
    tuned: dict[str, list[str]],
    max_words: int,
    semantics: Semantics,
) -> dict:
    """Row of the per-group consistency table.

    `base` / `tuned` map variant_id -> completions. Per model: gap = max_v H̄_v − min_v H̄_v over
    the variants' mean response entropies; semantic_agreement = share of all the group's samples in
    the modal meaning cluster; cross_variant_cosine = mean embedding cosine between samples of
    different variants; helpfulness = mean H_norm, words = mean length, empty_rate = share of empty
    answers over all samples; *_variant_entropy = JSON {variant_id: H̄_v}; *_axis_entropy,
    *_axis_helpfulness, *_axis_words = JSON {"axis=value": mean H, mean H_norm, mean length} over
    the samples of the variants with that value (variant A vs B comparisons, `AXIS_METRICS`).
    """
    if group.task != "consistency":
        raise ValueError(f"group {group.group_id!r} is a {group.task!r} task, not consistency")
    if len(group.members) < 2:
        raise ValueError(f"group {group.group_id!r}: a consistency group needs at least 2 variants")
    row: dict = {"group_id": group.group_id, "domain": group.domain, "n_variants": len(group.members)}
    for model, samples in (("base", base), ("tuned", tuned)):
        _check_samples(group, model, samples)
        means = variant_entropies(samples)
        texts = [text for m in group.members for text in samples[m.variant_id]]
        variant_of = [m.variant_id for m in group.members for _ in samples[m.variant_id]]
        vectors = semantics.embed(texts)
        row[f"{model}_gap"] = entropy_gap(means)
        row[f"{model}_semantic_agreement"] = semantic_agreement(semantics.clusters(vectors))
        row[f"{model}_cross_variant_cosine"] = cross_variant_cosine(vectors, variant_of)
        row[f"{model}_helpfulness"] = mean_helpfulness(texts, max_words)
        row[f"{model}_words"] = mean_words(texts)
        row[f"{model}_empty_rate"] = empty_rate(texts)
        row[f"{model}_variant_entropy"] = json.dumps(means, sort_keys=True)
        row[f"{model}_axis_entropy"] = json.dumps(axis_entropies(group, samples), sort_keys=True)
        helpfulness = axis_means(group, samples, lambda text: normalized_entropy(text, max_words))
        row[f"{model}_axis_helpfulness"] = json.dumps(helpfulness, sort_keys=True)
        lengths = axis_means(group, samples, lambda text: len(words(text)))
        row[f"{model}_axis_words"] = json.dumps(lengths, sort_keys=True)
    return {column: row[column] for column in CONSISTENCY_COLUMNS}


def diversity_record(
    group: PromptGroup,
    base: list[str],
    tuned: list[str],
    normalize: Callable[[str, list[str]], str | None],
    max_words: int,
    semantics: Semantics,
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
        raise ValueError(
            f"group {group.group_id!r}: {len(base)} base and {len(tuned)} tuned samples; diversity needs >= 2 each"
        )
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
        row[f"{model}_unique_at_n"] = unique_at_n(answers)
        row[f"{model}_tv_to_uniform"] = distance_to_uniform(answers, valid)
        row[f"{model}_kl_to_uniform"] = kl_to_uniform(answers, valid)
        row[f"{model}_js_to_uniform"] = js_distance_to_uniform(answers, valid)
        row[f"{model}_helpfulness"] = mean_helpfulness(texts, max_words)
        row[f"{model}_words"] = mean_words(texts)
        row[f"{model}_empty_rate"] = empty_rate(texts)
        counts = Counter(a for a in answers if a is not None)
        row[f"{model}_answer_counts"] = json.dumps({v: counts[v] for v in valid if counts[v]}, sort_keys=True)
    return {column: row[column] for column in DIVERSITY_COLUMNS}


def _column_mean(frame: pd.DataFrame, column: str, notes: list[str]) -> float | None:
    """Mean of a numeric column; None (with a note) when a value is NaN or infinite."""
    mean = float(pd.to_numeric(frame[column], errors="raise").astype(float).mean(skipna=False))
    if math.isfinite(mean):
        return mean
    notes.append(f"{column}: a per-group value is NaN or infinite, the mean is null")
    return None


def _require_columns(frame: pd.DataFrame, columns: list[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} table lacks columns {missing}")


# consistency means in metrics.json besides the gap, helpfulness and words (named as the columns)
_CONSISTENCY_EXTRA = tuple(_paired(("semantic_agreement", "cross_variant_cosine", "empty_rate")))


def _summarize_consistency(frame: pd.DataFrame, alpha: float, notes: list[str]) -> dict:
    keys = (
        "base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "t_statistic", "p_value",
        "p_value_wilcoxon", "significant", "base_helpfulness", "tuned_helpfulness",
        "base_mean_words", "tuned_mean_words", *_CONSISTENCY_EXTRA,
    )  # fmt: skip
    if len(frame) == 0:
        notes.append("consistency: no groups evaluated, every consistency metric is null")
        return {"n_groups": 0, **dict.fromkeys(keys), "significant": False}
    _require_columns(frame, CONSISTENCY_COLUMNS, "consistency")

    test = paired_test(frame["base_gap"].astype(float), frame["tuned_gap"].astype(float))
    notes.extend(f"consistency: {note}" for note in test.notes)
    base_gap, tuned_gap = test.mean_base, test.mean_tuned
    if base_gap == 0:
        relative = None
        notes.append("consistency: base mean gap is 0, relative_gap_reduction is null")
    else:
        relative = (base_gap - tuned_gap) / base_gap
    significant = test.p_value is not None and test.p_value < alpha
    if test.p_value is None:
        notes.append("consistency: p_value is null, significant is false")
    return {
        "n_groups": int(len(frame)),
        "base_mean_gap": base_gap,
        "tuned_mean_gap": tuned_gap,
        "relative_gap_reduction": relative,
        "t_statistic": test.t_statistic,
        "p_value": test.p_value,
        "p_value_wilcoxon": test.p_value_wilcoxon,
        "significant": bool(significant),
        "base_helpfulness": _column_mean(frame, "base_helpfulness", notes),
        "tuned_helpfulness": _column_mean(frame, "tuned_helpfulness", notes),
        "base_mean_words": _column_mean(frame, "base_words", notes),
        "tuned_mean_words": _column_mean(frame, "tuned_words", notes),
        **{key: _column_mean(frame, key, notes) for key in _CONSISTENCY_EXTRA},
    }


def _summarize_diversity(frame: pd.DataFrame, notes: list[str]) -> dict:
    columns = _paired(DIVERSITY_METRICS)
    if len(frame) == 0:
        notes.append("diversity: no tasks evaluated, every diversity metric is null")
        return {"n_tasks": 0, **dict.fromkeys(columns)}
    _require_columns(frame, DIVERSITY_COLUMNS, "diversity")
    return {"n_tasks": int(len(frame)), **{c: _column_mean(frame, c, notes) for c in columns}}


def summarize(consistency: pd.DataFrame, diversity: pd.DataFrame, alpha: float) -> dict:
    """Content of `metrics.json`: group-level means, the paired test on gaps, and notes.

    consistency: n_groups, base/tuned_mean_gap, the test keys below, base/tuned_helpfulness,
    base/tuned_mean_words, base/tuned_semantic_agreement, base/tuned_cross_variant_cosine,
    base/tuned_empty_rate. diversity: n_tasks and base/tuned_<m> for every m of DIVERSITY_METRICS
    (means over tasks; all null when no task was evaluated).

    relative_gap_reduction = (base_mean_gap − tuned_mean_gap) / base_mean_gap (null if the base
    gap is 0); t_statistic / p_value: paired t-test of per-group gaps base vs tuned;
    p_value_wilcoxon: Wilcoxon signed-rank test; significant: p_value < alpha. Undefined values
    are null (never NaN) and `notes` says why.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    notes: list[str] = []
    return {
        "consistency": _summarize_consistency(consistency, alpha, notes),
        "diversity": _summarize_diversity(diversity, notes),
        "notes": notes,
    }
