"""Per-group evaluation rows (base vs tuned on the same prompts and seeds) and their summary.

One `consistency_record` per held-out consistency group and one `diversity_record` per diversity
task; `summarize` turns the two tables into the content of `metrics.json`. Group-level means
weigh every group equally (a group's value is itself a mean over its samples).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pandas as pd

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
from components.evaluation.statistics import paired_test

MODELS = ("base", "tuned")

CONSISTENCY_COLUMNS = [
    "group_id", "domain", "n_variants",
    "base_gap", "tuned_gap",
    "base_helpfulness", "tuned_helpfulness",
    "base_words", "tuned_words",
    "base_variant_entropy", "tuned_variant_entropy",
]  # fmt: skip

DIVERSITY_COLUMNS = [
    "group_id", "domain", "n_samples",
    "base_distinct_1", "tuned_distinct_1",
    "base_distinct_2", "tuned_distinct_2",
    "base_validity", "tuned_validity",
    "base_coverage", "tuned_coverage",
    "base_distinct_answers", "tuned_distinct_answers",
    "base_tv_to_uniform", "tuned_tv_to_uniform",
]  # fmt: skip

# Diversity metrics averaged over tasks in metrics.json (distinct_answers stays per task).
_DIVERSITY_SUMMARY = ("distinct_1", "distinct_2", "validity", "coverage", "tv_to_uniform")


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


def consistency_record(
    group: PromptGroup,
    base: dict[str, list[str]],
    tuned: dict[str, list[str]],
    max_words: int,
) -> dict:
    """Row of the per-group consistency table.

    `base` / `tuned` map variant_id -> completions. gap = max_v H̄_v − min_v H̄_v over the
    variants' mean response entropies; helpfulness = mean H_norm and words = mean length over all
    samples of the group; *_variant_entropy = JSON {variant_id: H̄_v}.
    """
    if group.task != "consistency":
        raise ValueError(f"group {group.group_id!r} is a {group.task!r} task, not consistency")
    row: dict = {
        "group_id": group.group_id,
        "domain": group.domain,
        "n_variants": len(group.members),
    }
    for model, samples in (("base", base), ("tuned", tuned)):
        _check_samples(group, model, samples)
        means = variant_entropies(samples)
        texts = [text for completions in samples.values() for text in completions]
        row[f"{model}_gap"] = entropy_gap(means)
        row[f"{model}_helpfulness"] = mean_helpfulness(texts, max_words)
        row[f"{model}_words"] = mean_words(texts)
        row[f"{model}_variant_entropy"] = json.dumps(means, sort_keys=True)
    return {column: row[column] for column in CONSISTENCY_COLUMNS}


def diversity_record(
    group: PromptGroup,
    base: list[str],
    tuned: list[str],
    normalize: Callable[[str, list[str]], str | None],
) -> dict:
    """Row of the per-task diversity table.

    `normalize(text, valid_answers)` maps a completion onto the valid set V (or None). Reports
    distinct-1/2 of the texts and validity, coverage, distinct answers and TV distance to the
    uniform distribution over V of the normalised answers (see `metrics`).
    """
    if group.task != "diversity":
        raise ValueError(f"group {group.group_id!r} is a {group.task!r} task, not diversity")
    if not group.valid_answers:
        raise ValueError(f"group {group.group_id!r}: diversity task without valid_answers")
    if not base or not tuned:
        raise ValueError(f"group {group.group_id!r}: no base or no tuned samples")
    if len(base) != len(tuned):
        raise ValueError(
            f"group {group.group_id!r}: {len(base)} base vs {len(tuned)} tuned samples "
            "(both models must be sampled on the same prompts and seeds)"
        )
    valid = list(group.valid_answers)
    row: dict = {"group_id": group.group_id, "domain": group.domain, "n_samples": len(base)}
    samples = {"base": base, "tuned": tuned}
    answers = {
        model: [normalize(text, valid) for text in texts] for model, texts in samples.items()
    }
    for model, texts in samples.items():
        given = answers[model]
        row[f"{model}_distinct_1"] = distinct_n(texts, 1)
        row[f"{model}_distinct_2"] = distinct_n(texts, 2)
        row[f"{model}_validity"] = validity(given)
        row[f"{model}_coverage"] = coverage(given, valid)
        row[f"{model}_distinct_answers"] = distinct_answers(given)
        row[f"{model}_tv_to_uniform"] = distance_to_uniform(given, valid)
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


def _summarize_consistency(frame: pd.DataFrame, alpha: float, notes: list[str]) -> dict:
    keys = (
        "base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "t_statistic", "p_value",
        "p_value_wilcoxon", "significant", "base_helpfulness", "tuned_helpfulness",
        "base_mean_words", "tuned_mean_words",
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
    }


def _summarize_diversity(frame: pd.DataFrame, notes: list[str]) -> dict:
    columns = [f"{model}_{name}" for name in _DIVERSITY_SUMMARY for model in MODELS]
    if len(frame) == 0:
        notes.append("diversity: no tasks evaluated, every diversity metric is null")
        return {"n_tasks": 0, **dict.fromkeys(columns)}
    _require_columns(frame, DIVERSITY_COLUMNS, "diversity")
    return {"n_tasks": int(len(frame)), **{c: _column_mean(frame, c, notes) for c in columns}}


def summarize(consistency: pd.DataFrame, diversity: pd.DataFrame, alpha: float) -> dict:
    """Content of `metrics.json`: group-level means, the paired test on gaps, and notes.

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
