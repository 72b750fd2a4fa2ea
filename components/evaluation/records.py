"""Per-group evaluation rows (base vs tuned on the same prompts and seeds) and their summary.

One `consistency_record` per held-out consistency group and one `diversity_record` per diversity
task; `summarize` turns the two tables into the statistics of `metrics.json` (its `consistency`,
`diversity` and `notes`, as a dict; `components.evaluation.run.evaluation_summary` validates them
into the `EvaluationSummary` contract, `components.contracts.summary`, whose fields these keys
are). Group-level means weigh every group equally (a group's value is itself a mean over its
samples).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from components.contracts.errors import UserError
from components.data.schema import PromptGroup
from components.embeddings import threshold_clusters
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
from components.evaluation.statistics import (
    benjamini_hochberg,
    bootstrap_ci,
    detectable_effect,
    one_sample_test,
    paired_test,
)
from components.rewards.entropy import EntropyScope, normalized_entropy, response_entropy, words

MODELS = ("base", "tuned")

# per-group numbers compared base vs tuned (each also a `base_<name>` / `tuned_<name>` column);
# "gap" is the paper's gap on the headline axis, the first entry the headline of every report
CONSISTENCY_METRICS = (
    "gap", "any_variant_gap", "paraphrase_gap", "signed_diff", "noise_floor", "excess_gap", "within_variant_sd",
    "semantic_agreement", "cross_variant_cosine", "helpfulness", "words", "empty_rate", "truncated_share",
)  # fmt: skip
DIVERSITY_METRICS = (
    "distinct_1", "distinct_2", "self_bleu", "vendi", "semantic_entropy", "n_clusters",
    "validity", "coverage", "all_valid", "unique_at_n", "tv_to_uniform", "kl_to_uniform", "js_to_uniform",
    "helpfulness", "words", "empty_rate",
)  # fmt: skip
# lower is better for these (used by the report to say which way a change goes)
LOWER_IS_BETTER = {
    "gap", "any_variant_gap", "paraphrase_gap", "excess_gap", "truncated_share", "self_bleu", "tv_to_uniform", "kl_to_uniform", "js_to_uniform", "empty_rate",
}  # fmt: skip


class EvaluationInputError(UserError, ValueError):
    """The evaluation set or the checkpoint cannot be evaluated (the message says why)."""


def _paired(names: Sequence[str]) -> list[str]:
    return [f"{model}_{name}" for name in names for model in MODELS]


CONSISTENCY_COLUMNS = [
    "group_id", "domain", "axis", "n_variants", "n_samples", *_paired(CONSISTENCY_METRICS),
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
    row: dict = {
        "group_id": group.group_id, "domain": group.domain, "axis": axis, "n_variants": len(group.members),
        "n_samples": sum(len(base.get(m.variant_id, ())) for m in group.members),
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


@dataclass(frozen=True)
class SummarySettings:
    """How the summary judges an evaluation: significance level, validity rule, power, bootstrap."""

    alpha: float = 0.01
    max_truncated_share: float = 0.05  # above it the consistency evaluation is invalid
    max_new_tokens: int | None = None  # for the invalid_reason message
    power: float = 0.8  # of the detectable-effect design analysis
    bootstrap_resamples: int = 2000
    confidence_level: float = 0.95
    seed: int = 0


# consistency means in metrics.json besides the headline gap (named as the columns)
_CONSISTENCY_MEANS = (
    *_paired(("any_variant_gap", "noise_floor", "excess_gap", "within_variant_sd")),
    "base_helpfulness", "tuned_helpfulness",
    *_paired(("semantic_agreement", "cross_variant_cosine", "empty_rate")),
)  # fmt: skip


def _gap_test(frame: pd.DataFrame, settings: SummarySettings) -> dict:
    """Paired test and bootstrap CI of the per-group headline gap, base vs tuned."""
    base, tuned = frame["base_gap"].astype(float), frame["tuned_gap"].astype(float)
    test = paired_test(base, tuned)
    ci = bootstrap_ci(base, tuned, settings.bootstrap_resamples, settings.confidence_level, settings.seed)
    relative = None if not test.mean_base else (test.mean_base - test.mean_tuned) / test.mean_base
    notes = list(test.notes)
    if test.mean_base == 0:
        notes.append("base mean gap is 0, relative_gap_reduction is null")
    return {
        "n_groups": int(len(frame)), "base_mean_gap": test.mean_base, "tuned_mean_gap": test.mean_tuned,
        "relative_gap_reduction": relative, "t_statistic": test.t_statistic, "p_value": test.p_value,
        "p_value_wilcoxon": test.p_value_wilcoxon, "ci_low": None if ci is None else ci[0],
        "ci_high": None if ci is None else ci[1], "notes": notes,
    }  # fmt: skip


def _weighted_share(frame: pd.DataFrame, column: str) -> float:
    weights = frame["n_samples"].astype(float)
    return float((frame[column].astype(float) * weights).sum() / weights.sum()) if weights.sum() else 0.0


_REASON_TOL = 1e-9  # changes smaller than this are rounding, not a reason


def _gap_change_reason(base: dict, tuned: dict) -> str | None:
    """Why the tuned gap is lower, from gap = noise floor + excess: less systematic difference
    (the excess over the floor fell) and/or less spread (the floor itself fell); None when a mean
    is undefined."""
    if any(v is None for v in (*base.values(), *tuned.values())):
        return None
    drop = base["gap"] - tuned["gap"]
    if drop <= _REASON_TOL:
        return "the tuned gap is not lower than the base gap"
    from_excess, from_floor = base["excess"] - tuned["excess"], base["floor"] - tuned["floor"]
    parts = []
    if from_excess > _REASON_TOL:
        parts.append(f"less systematic difference (excess over the noise floor {from_excess:.3f} lower)")
    if from_floor > _REASON_TOL:
        parts.append(f"less spread (noise floor {from_floor:.3f} lower)")
    main = "systematic difference" if from_excess >= from_floor else "spread"
    return f"gap {drop:.3f} lower: " + " and ".join(parts) + f"; mostly {main}"


def _summarize_consistency(frame: pd.DataFrame, settings: SummarySettings, notes: list[str]) -> dict:
    keys = (
        "axis", "base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "t_statistic", "p_value",
        "p_value_wilcoxon", "q_value", "ci_low", "ci_high", "significant", "base_helpfulness",
        "tuned_helpfulness", "base_mean_words", "tuned_mean_words", "base_truncated_share",
        "tuned_truncated_share", *_CONSISTENCY_MEANS,
    )  # fmt: skip
    if len(frame) == 0:
        notes.append("consistency: no groups evaluated, every consistency metric is null")
        return {"n_groups": 0, **dict.fromkeys(keys), "significant": False, "valid": False,
                "invalid_reason": "no consistency group evaluated", "per_domain": {}}  # fmt: skip
    _require_columns(frame, CONSISTENCY_COLUMNS, "consistency")

    overall = _gap_test(frame, settings)
    notes.extend(f"consistency: {note}" for note in overall.pop("notes"))
    per_domain = {}
    for domain, part in frame.groupby("domain", sort=True):
        result = _gap_test(part, settings)
        result.pop("notes")
        per_domain[str(domain)] = result
    # BH over the family of headline tests: overall and every domain (Benjamini & Hochberg 1995)
    q_values = benjamini_hochberg([overall["p_value"], *(d["p_value"] for d in per_domain.values())])
    overall["q_value"] = q_values[0]
    for result, q in zip(per_domain.values(), q_values[1:]):
        result["q_value"] = q
    if overall["p_value"] is None:
        notes.append("consistency: p_value is null, significant is false")
    significant = overall["q_value"] is not None and overall["q_value"] < settings.alpha

    # sampling noise: floor, systematic (signed) difference, the change a design of this size detects
    signed = {model: one_sample_test(frame[f"{model}_signed_diff"].astype(float)) for model in MODELS}
    sd_base = float(frame["base_gap"].astype(float).std(ddof=1)) if len(frame) > 1 else 0.0
    sd_diff = float((frame["base_gap"] - frame["tuned_gap"]).astype(float).std(ddof=1)) if len(frame) > 1 else 0.0
    detectable = detectable_effect(math.sqrt(2) * sd_base, len(frame), settings.alpha, settings.power)
    observed_detectable = detectable_effect(sd_diff, len(frame), settings.alpha, settings.power)
    base_gap = overall["base_mean_gap"]
    means = {key: _column_mean(frame, key, notes) for key in _CONSISTENCY_MEANS}
    reason = _gap_change_reason(
        {"gap": base_gap, "excess": means["base_excess_gap"], "floor": means["base_noise_floor"]},
        {"gap": overall["tuned_mean_gap"], "excess": means["tuned_excess_gap"], "floor": means["tuned_noise_floor"]},
    )

    truncated = {model: _weighted_share(frame, f"{model}_truncated_share") for model in MODELS}
    worst = max(truncated, key=truncated.get)
    valid = truncated[worst] <= settings.max_truncated_share + 1e-12
    invalid_reason = None
    if not valid:
        limit = f"max_new_tokens = {settings.max_new_tokens}" if settings.max_new_tokens else "max_new_tokens"
        invalid_reason = (
            f"{truncated['base']:.1%} of base and {truncated['tuned']:.1%} of tuned consistency samples hit {limit} "
            f"(more than {settings.max_truncated_share:.0%}): the entropies are those of cut answers"
        )
        notes.append(f"consistency: INVALID evaluation: {invalid_reason}")
    paraphrased = frame["base_paraphrase_gap"].astype(float).notna()
    return {
        "axis": str(frame["axis"].iloc[0]) if frame["axis"].nunique() == 1 else ",".join(sorted(frame["axis"].unique())),
        **overall,
        "significant": bool(significant),
        "per_domain": per_domain,
        **means,
        "base_mean_words": _column_mean(frame, "base_words", notes),
        "tuned_mean_words": _column_mean(frame, "tuned_words", notes),
        "n_paraphrased_groups": int(paraphrased.sum()),
        "base_paraphrase_gap": float(frame.loc[paraphrased, "base_paraphrase_gap"].mean()) if paraphrased.any() else None,
        "tuned_paraphrase_gap": float(frame.loc[paraphrased, "tuned_paraphrase_gap"].mean()) if paraphrased.any() else None,
        "base_signed_diff": signed["base"][0],
        "base_signed_diff_p": signed["base"][1],
        "tuned_signed_diff": signed["tuned"][0],
        "tuned_signed_diff_p": signed["tuned"][1],
        "gap_change_reason": reason,
        "detectable_reduction": detectable,
        "detectable_relative_reduction": None if detectable is None or not base_gap else detectable / base_gap,
        "observed_detectable_reduction": observed_detectable,
        "power": settings.power,
        "alpha": settings.alpha,
        "base_truncated_share": truncated["base"],
        "tuned_truncated_share": truncated["tuned"],
        "max_new_tokens": settings.max_new_tokens,
        "valid": bool(valid),
        "invalid_reason": invalid_reason,
    }


def _summarize_diversity(frame: pd.DataFrame, notes: list[str]) -> dict:
    columns = _paired(DIVERSITY_METRICS)
    if len(frame) == 0:
        notes.append("diversity: no tasks evaluated, every diversity metric is null")
        return {"n_tasks": 0, **dict.fromkeys(columns)}
    _require_columns(frame, DIVERSITY_COLUMNS, "diversity")
    return {"n_tasks": int(len(frame)), **{c: _column_mean(frame, c, notes) for c in columns}}


def summarize(
    consistency: pd.DataFrame, diversity: pd.DataFrame, settings: SummarySettings | float | None = None,
    *, alpha: float | None = None,
) -> dict:  # fmt: skip
    """Content of `metrics.json`: the paper's gap first, then quality, noise and validity; notes.

    consistency (`_summarize_consistency`): axis; n_groups; base/tuned_mean_gap (the paper's gap on
    `axis`, mean over groups), relative_gap_reduction = (base − tuned) / base, paired t-test
    t_statistic / p_value, p_value_wilcoxon, q_value (Benjamini–Hochberg over the overall and the
    per-domain tests), bootstrap ci_low / ci_high of tuned − base, significant (q < alpha);
    per_domain {domain: the same test keys}; the any-variant and paraphrase gaps; noise floor,
    excess and within-variant sd; signed A − B difference with its one-sample p; the reason a
    lower gap is lower; detectable_reduction (80 % power at alpha, sd of differences taken as
    √2 × the sd of base gaps) and observed_detectable_reduction (from the observed differences);
    helpfulness, words, agreement, cosine and empty rate; base/tuned_truncated_share and `valid`
    (false, with invalid_reason, when more than max_truncated_share of a model's samples were
    cut). diversity: n_tasks and base/tuned_<m> for every m of DIVERSITY_METRICS. Undefined values
    are null (never NaN) and `notes` says why. A bare float `settings` (or `alpha`) is the
    significance level, with the other settings at their defaults.
    """
    if not isinstance(settings, SummarySettings):
        level = alpha if alpha is not None else settings
        settings = SummarySettings() if level is None else SummarySettings(alpha=float(level))
    if not 0 < settings.alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {settings.alpha}")
    notes: list[str] = []
    return {
        "consistency": _summarize_consistency(consistency, settings, notes),
        "diversity": _summarize_diversity(diversity, notes),
        "notes": notes,
    }
