"""The summary of an evaluation: the per-group tables (`records`) into the statistics of
`metrics.json` (its `consistency`, `diversity` and `notes`, as a dict;
`components.evaluation.run.evaluation_summary` validates them into the `EvaluationSummary`
contract, `components.contracts.summary`, whose fields these keys are). Group-level means weigh
every group equally (a group's value is itself a mean over its samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from components.evaluation.records import CONSISTENCY_COLUMNS, DIVERSITY_COLUMNS, DIVERSITY_METRICS, MODELS, paired_columns
from components.evaluation.statistics import (
    benjamini_hochberg,
    bootstrap_ci,
    detectable_effect,
    one_sample_test,
    paired_test,
)
from components.formatting import percent


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
    *paired_columns(("any_variant_gap", "noise_floor", "excess_gap", "within_variant_sd")),
    "base_helpfulness", "tuned_helpfulness",
    *paired_columns(("semantic_agreement", "cross_variant_cosine", "empty_rate")),
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


def _paired_change(frame: pd.DataFrame, metric: str, settings: SummarySettings) -> dict | None:
    """base/tuned means of a per-group metric over the groups that define it, the paired t-test and
    bootstrap CI of tuned − base; None when fewer than two groups define it."""
    pair = frame[[f"base_{metric}", f"tuned_{metric}"]].astype(float).dropna()
    if len(pair) < 2:
        return None
    base, tuned = pair.iloc[:, 0], pair.iloc[:, 1]
    test = paired_test(base, tuned)
    ci = bootstrap_ci(base, tuned, settings.bootstrap_resamples, settings.confidence_level, settings.seed)
    return {"base": test.mean_base, "tuned": test.mean_tuned, "p": test.p_value, "ci": ci or (None, None)}


def _length_and_compliance(frame: pd.DataFrame, settings: SummarySettings, notes: list[str]) -> dict:
    """Sentences, instruction compliance and the length-controlled gap: means, paired changes (CI, p)
    and BH q over the two tests (compliance change, length-controlled gap change)."""
    out: dict = {key: None for key in _LENGTH_KEYS}
    if "max_sentences" not in frame.columns:
        notes.append("consistency: the per-group table has no sentence columns (written before they existed)")
        return out
    out["base_sentences"] = _column_mean(frame, "base_sentences", notes)
    out["tuned_sentences"] = _column_mean(frame, "tuned_sentences", notes)
    limits = frame["max_sentences"].astype(float).dropna()
    out["max_sentences"] = int(limits.min()) if len(limits) else None
    if len(limits) and limits.nunique() > 1:
        notes.append(
            f"consistency: prompts state different sentence limits {sorted(set(limits.astype(int)))}; each answer is judged by its own"
        )
    compliance = _paired_change(frame, "compliance", settings)
    if compliance is None:
        notes.append("consistency: no prompt states a sentence limit (data.answer_instruction), compliance is null")
    else:
        out |= {"base_compliance": compliance["base"], "tuned_compliance": compliance["tuned"],
                "compliance_change": compliance["tuned"] - compliance["base"], "compliance_p_value": compliance["p"],
                "compliance_ci_low": compliance["ci"][0], "compliance_ci_high": compliance["ci"][1]}  # fmt: skip
    controlled = _paired_change(frame, "length_controlled_gap", settings)
    if controlled is None:
        notes.append("consistency: too few answers or lengths to fit entropy on length, the length-controlled gap is null")
    else:
        base = controlled["base"]
        out |= {"base_length_controlled_gap": base, "tuned_length_controlled_gap": controlled["tuned"],
                "length_controlled_reduction": (base - controlled["tuned"]) / base if base else None,
                "length_controlled_p_value": controlled["p"], "length_controlled_ci_low": controlled["ci"][0],
                "length_controlled_ci_high": controlled["ci"][1]}  # fmt: skip
    q = benjamini_hochberg([out["compliance_p_value"], out["length_controlled_p_value"]])
    out["compliance_q_value"], out["length_controlled_q_value"] = q
    return out


_LENGTH_KEYS = (
    "max_sentences", "base_sentences", "tuned_sentences", "base_compliance", "tuned_compliance", "compliance_change",
    "compliance_ci_low", "compliance_ci_high", "compliance_p_value", "compliance_q_value", "base_length_controlled_gap",
    "tuned_length_controlled_gap", "length_controlled_reduction", "length_controlled_ci_low", "length_controlled_ci_high",
    "length_controlled_p_value", "length_controlled_q_value",
)  # fmt: skip


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
        "tuned_truncated_share", *_CONSISTENCY_MEANS, *_LENGTH_KEYS,
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
            f"{percent(truncated['base'], 1)} of base and {percent(truncated['tuned'], 1)} of tuned consistency samples hit {limit} "
            f"(more than {percent(settings.max_truncated_share)}): the entropies are those of cut answers"
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
        **_length_and_compliance(frame, settings, notes),
    }


def _summarize_diversity(frame: pd.DataFrame, notes: list[str]) -> dict:
    columns = paired_columns(DIVERSITY_METRICS)
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
