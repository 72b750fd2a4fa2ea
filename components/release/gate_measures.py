"""What each gate measures (the `measure` of a `GateSpec` row): structure (no_nan, heldout), the
headline gap (gap_reduction, truncation, significance), the quality guards (worsening, relative
drop and growth, compliance, versus the champion) and the decisions (fairness, profile correlation).
Each gate's rule, with its reasons: `components.release.gate`'s docstring."""

from __future__ import annotations

import math
from collections.abc import Mapping

from components import formatting
from components.contracts.summary import leaves
from components.contracts.version_tags import Champion
from components.release.gate_spec import (
    AXIS,
    BASE_GAP,
    DEFAULT_SIGNIFICANCE,
    INVALID_REASON,
    MAX_NEW_TOKENS,
    MAX_SENTENCES,
    MISSING,
    N_GROUPS,
    N_TASKS,
    P_VALUE,
    Q_VALUE,
    RELATIVE,
    SLACK,
    TUNED_GAP,
    VALID,
    GateResult,
    GateSpec,
    as_number,
    at_most,
    base_and_tuned,
    get_metric,
    missing_result,
    shown_pair,
    summary_key,
    within,
)

# --- measures: structure --------------------------------------------------------------------------

# metrics the gates rely on: never null
_REQUIRED = {
    f"consistency.{summary_key(k)}"
    for k in ("n_groups", "base_mean_gap", "tuned_mean_gap", "base_helpfulness", "tuned_helpfulness",
              "base_words", "tuned_words", "base_empty_rate", "tuned_empty_rate",
              "base_truncated_share", "tuned_truncated_share")
}  # fmt: skip


def _null_allowed(path: str, metrics: Mapping) -> bool:
    if path == f"consistency.{RELATIVE}":
        return get_metric(metrics, "consistency", BASE_GAP) == 0
    if path.startswith("diversity."):
        return get_metric(metrics, "diversity", N_TASKS) == 0
    # any other null (p-values for n < 2, a statistic the evaluation could not compute) is a
    # legitimately absent value; the gate that needs it fails on its own if it is missing
    return path not in _REQUIRED


def no_nan(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """Every number is finite; nulls only where documented as legitimate (module docstring)."""
    problems = []
    for path, value in leaves(metrics):
        number = as_number(value)
        if number is not None and not math.isfinite(number):
            problems.append(f"{path} = {value}")
        elif value is None and not _null_allowed(path, metrics):
            problems.append(f"{path} is null")
    if problems:
        reason = f"{spec.name}: {len(problems)} non-finite or unexpected null value(s): " + "; ".join(problems)
    else:
        reason = f"{spec.name}: all metrics finite"
    return GateResult(spec.name, float(len(problems)), threshold, not problems, reason)


# --- measures: the headline gap -------------------------------------------------------------------


def gap_reduction(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """(base_gap − tuned_gap) / base_gap >= threshold; a zero base gap passes only with a zero tuned gap."""
    name = spec.name
    relative = get_metric(metrics, spec.section, RELATIVE)
    pair = [as_number(get_metric(metrics, spec.section, key)) for key in spec.keys()]
    if None in pair or relative is MISSING:
        return missing_result(name, threshold, f"{spec.section}.{BASE_GAP} / {TUNED_GAP} / {RELATIVE} (as numbers)")
    base, tuned = pair
    gaps = f"tuned mean entropy gap {formatting.number(tuned, 2)} vs base {formatting.number(base, 2)}"
    if relative is None:
        passed = base == 0 and tuned == 0
        if passed:
            verdict = "both gaps are 0"
        elif base == 0:
            verdict = "base gap is 0 but tuned gap is not"
        else:
            verdict = "relative_gap_reduction is null although the base gap is not 0"
        return GateResult(name, None, threshold, passed, f"{name}: undefined, {verdict} ({gaps})")
    value = as_number(relative)
    if value is None or not math.isfinite(value):
        return GateResult(name, None, threshold, False, f"{name}: {relative!r} is not a number")
    passed = value >= threshold - SLACK
    shown, limit = shown_pair(value, threshold)
    sign = ">=" if passed else "<"
    return GateResult(name, value, threshold, passed, f"{name}: {shown} {sign} {limit} ({gaps})")


def _truncated_samples(base: float, tuned: float, metrics: Mapping) -> str:
    """'12.5% of base samples and 3.0% of tuned samples hit max_new_tokens = 32'."""
    limit = get_metric(metrics, "consistency", MAX_NEW_TOKENS)
    shown = f" = {limit}" if as_number(limit) is not None else ""
    return f"{formatting.percent(base, 1)} of base samples and {formatting.percent(tuned, 1)} of tuned samples hit max_new_tokens{shown}"


def _declared_invalid(metrics: Mapping) -> str | None:
    """Why the evaluation declared itself invalid (``consistency.valid`` false), else None."""
    if get_metric(metrics, "consistency", VALID) is not False:
        return None
    why = get_metric(metrics, "consistency", INVALID_REASON)
    return str(why) if why not in (None, "", MISSING) else f"consistency.{VALID} is false"


def truncation(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """max(base, tuned truncated share) <= threshold, and ``consistency.valid`` is not false;
    missing shares fail (truncation not recorded)."""
    name = spec.name
    base_key, tuned_key = spec.keys()
    pair = base_and_tuned(metrics, spec.section, base_key, tuned_key)
    if pair is None:
        return missing_result(name, threshold, f"{spec.section}.{base_key} / {tuned_key} (as finite "
                        "numbers): an evaluation that did not record truncation cannot register")  # fmt: skip
    worst, hits, limit = max(pair), _truncated_samples(*pair, metrics), formatting.percent(threshold, None)
    problems = [] if within(worst, threshold) else [f"{hits} (> {limit}); raise eval.max_new_tokens"]
    invalid = _declared_invalid(metrics)
    problems += [invalid] if invalid is not None else []
    if problems:
        reason = f"{name}: consistency evaluation invalid: " + "; ".join(problems)
    else:
        reason = f"{name}: {hits} (<= {limit})"
    return GateResult(name, worst, threshold, not problems, reason)


def _headline_test(metrics: Mapping) -> tuple[str, object, str]:
    """(key judged, its value, the test as words): ``q_value``, or ``p_value`` in older metrics."""
    part = metrics.get("consistency")
    adjusted = isinstance(part, Mapping) and Q_VALUE in part
    key = Q_VALUE if adjusted else P_VALUE
    axis = get_metric(metrics, "consistency", AXIS)
    n = get_metric(metrics, "consistency", N_GROUPS)
    gap = f"per-group {axis if isinstance(axis, str) and axis else 'entropy'} gap"
    size = f"n = {n if n is not MISSING else '?'}"
    if adjusted:
        test = f"paired t-test on the {gap}, BH-adjusted, {size}"
    else:
        test = f"paired t-test on the {gap}, {size}; metrics have no {Q_VALUE}: unadjusted {P_VALUE} judged"
    return key, get_metric(metrics, "consistency", key), test


def significance(spec: GateSpec, metrics: Mapping, required: float, champion: Champion | None) -> GateResult:
    """q <= α and tuned_mean_gap < base_mean_gap, q the BH-adjusted p-value of the paired test
    (``p_value`` when the metrics have no ``q_value``), α the evaluation's own level
    (``consistency.alpha``); off when `required` (``gate.require_significance``) is false."""
    name = spec.name
    level = as_number(get_metric(metrics, "consistency", "alpha"))
    unrecorded = level is None or not math.isfinite(level)
    threshold = DEFAULT_SIGNIFICANCE if unrecorded else level
    key, raw, test = _headline_test(metrics)
    if unrecorded:
        test += f"; metrics record no significance level: judged at {DEFAULT_SIGNIFICANCE}"
    if raw is MISSING:
        return missing_result(name, threshold, f"consistency.{key}")
    symbol, disabled, off = key[0], not required, "gate off (require_significance: false)"
    if raw is None:
        verdict = off if disabled else f"the level {threshold:g} requires a defined {key}"
        return GateResult(name, None, threshold, disabled, f"{name}: {symbol} undefined ({test}); {verdict}")
    value = as_number(raw)
    if value is None or not math.isfinite(value):
        return GateResult(name, None, threshold, False, f"{name}: {raw!r} is not a number")
    shown = f"{symbol} = {formatting.p_value(value)}"
    if disabled:
        return GateResult(name, value, threshold, True, f"{name}: {shown}, {off} ({test})")
    if not within(value, threshold):
        return GateResult(name, value, threshold, False, f"{name}: {shown} > {threshold:g} ({test})")
    return _gap_fell(spec, value, threshold, metrics, f"{shown} <= {threshold:g} ({test})")


def _gap_fell(spec: GateSpec, value: float, threshold: float, metrics: Mapping, significant: str) -> GateResult:
    """A significant difference passes only when it is a fall: tuned_mean_gap < base_mean_gap."""
    name, (base_key, tuned_key) = spec.name, spec.keys()
    pair = base_and_tuned(metrics, spec.section, base_key, tuned_key)
    if pair is None:
        return missing_result(name, threshold, f"{spec.section}.{base_key} / {tuned_key} (as finite numbers)")
    base, tuned = pair
    if tuned < base:
        return GateResult(name, value, threshold, True, f"{name}: {significant}; the gap fell "
                          f"(tuned mean gap {formatting.significant(tuned)} < base {formatting.significant(base)})")  # fmt: skip
    change = "rose: a significant increase" if tuned > base else "did not fall"
    return GateResult(name, value, threshold, False, f"{name}: {significant}, but the gap {change} "
                      f"(tuned mean gap {formatting.significant(tuned)} vs base {formatting.significant(base)})")  # fmt: skip


# --- measures: the quality guard ------------------------------------------------------------------


def _section_pair(spec: GateSpec, metrics: Mapping, threshold: float) -> tuple[float, float] | GateResult:
    """(base, tuned) of the spec's pair, or the result that settles the gate at once: a pass noted
    when no diversity task was evaluated, a failure when a value is missing."""
    if spec.section == "diversity" and get_metric(metrics, "diversity", N_TASKS) == 0:
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: no diversity task evaluated (not judged)")
    base_key, tuned_key = spec.keys()
    pair = base_and_tuned(metrics, spec.section, base_key, tuned_key)
    if pair is None:
        return missing_result(spec.name, threshold, f"{spec.section}.{base_key} / {tuned_key} (as finite numbers)")
    return pair


def worsening(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """Worsening base -> tuned <= threshold (the metric's units): base − tuned (a drop) when higher
    is better, tuned − base (an increase) otherwise."""
    pair = _section_pair(spec, metrics, threshold)
    if isinstance(pair, GateResult):
        return pair
    base, tuned = pair
    worse, change = (base - tuned, "drop") if spec.higher_is_better else (tuned - base, "increase")
    passed, comparison = at_most(worse, threshold)
    return GateResult(
        spec.name, worse, threshold, passed,
        f"{spec.name}: {change} {comparison} (tuned {spec.what} {formatting.number(tuned, 2)} vs base {formatting.number(base, 2)})",
    )  # fmt: skip


def compliance_drop(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """base − tuned instruction compliance <= threshold; off when null; passes with a note when no
    prompt states a sentence limit (``max_sentences`` null: nothing to keep); missing keys fail."""
    if not math.isfinite(threshold):
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: gate off (gate.{spec.threshold} is null)")
    if get_metric(metrics, spec.section, MAX_SENTENCES) is None and get_metric(metrics, spec.section, spec.keys()[0]) is None:
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: no prompt states a sentence limit (not judged)")
    return worsening(spec, metrics, threshold, champion)


def relative_drop(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """(base − tuned) / base <= threshold, i.e. tuned >= (1 − threshold) × base; an empty base passes."""
    return _relative_change(spec, metrics, threshold, -1.0)


def relative_growth(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """(tuned − base) / base <= threshold, i.e. tuned <= (1 + threshold) × base (answers that grew
    past what the prompt asked for: length bought consistency); an empty base passes; off when null."""
    if not math.isfinite(threshold):
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: gate off (gate.{spec.threshold} is null)")
    return _relative_change(spec, metrics, threshold, 1.0)


def _relative_change(spec: GateSpec, metrics: Mapping, threshold: float, sign: float) -> GateResult:
    """sign · (tuned − base) / base <= threshold (sign −1: a drop, +1: a growth)."""
    pair = _section_pair(spec, metrics, threshold)
    if isinstance(pair, GateResult):
        return pair
    base, tuned = pair
    shown = f"tuned {formatting.number(tuned, 1)} {spec.what} vs base {formatting.number(base, 1)}"
    if base == 0:
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: base responses are empty, no length to compare ({shown})")
    change = sign * (tuned - base) / base
    passed, comparison = at_most(change, threshold)
    kind = "drop" if sign < 0 else "growth"
    return GateResult(spec.name, change, threshold, passed, f"{spec.name}: relative {kind} {comparison} ({shown})")


def versus_champion(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """Worsening of the spec's field relative to the champion's recorded value <= threshold."""
    name, (key,) = spec.name, spec.keys()
    if champion is None:
        return GateResult(name, None, threshold, True, f"{name}: no champion yet (not judged)")
    ours = as_number(get_metric(metrics, spec.section, key))
    if ours is None or not math.isfinite(ours):
        return missing_result(name, threshold, f"{spec.section}.{key} (as a finite number)")
    theirs = as_number(get_metric(champion.metrics, spec.section, key))
    if theirs is None or not math.isfinite(theirs):
        return GateResult(
            name, None, threshold, True,
            f"{name}: champion v{champion.version} has no recorded {spec.section}.{key} (not judged)",
        )  # fmt: skip
    worse = theirs - ours if spec.higher_is_better else ours - theirs
    passed, comparison = at_most(worse, threshold)
    return GateResult(
        name, worse, threshold, passed,
        f"{name}: {spec.what} worse by {comparison} ({formatting.significant(ours)} vs champion v{champion.version} {formatting.significant(theirs)})",
    )  # fmt: skip


# --- measures: decisions that treat people alike ---------------------------------------------------


def _score_growth(benchmark: str, summary: object) -> tuple[list[tuple[float, str]], list[str]]:
    """(|tuned score| − |base score|, description) of each gated score of one benchmark, and what is missing."""
    if not isinstance(summary, Mapping):
        return [], [f"fairness.{benchmark} is not a benchmark summary"]
    scores, growths, missing = summary.get("scores") or {}, [], []
    for key in summary.get("gated") or []:
        score = scores.get(key) if isinstance(scores, Mapping) else None
        base = as_number(score.get("base_score")) if isinstance(score, Mapping) else None
        tuned = as_number(score.get("tuned_score")) if isinstance(score, Mapping) else None
        if base is None or tuned is None:
            missing.append(f"fairness.{benchmark}.scores.{key}.base_score / tuned_score")
            continue
        growth = abs(tuned) - abs(base)
        growths.append((growth, f"{benchmark} {key} {formatting.signed(base)} -> {formatting.signed(tuned)}"))
    if not summary.get("gated"):
        missing.append(f"fairness.{benchmark}.gated (no score to judge)")
    return growths, missing


def _fairness_section(spec: GateSpec, metrics: Mapping, threshold: float) -> Mapping | GateResult:
    """The ``fairness`` section a decision-benchmark gate judges, or its result already: passed when
    the gate is off (a null threshold, +inf here), failed when no benchmark was evaluated."""
    if not math.isfinite(threshold):
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: gate off (gate.{spec.threshold} is null)")
    section = metrics.get("fairness")
    if not isinstance(section, Mapping) or not section:
        return missing_result(spec.name, threshold, "fairness (no decision benchmark evaluated; see eval.fairness.benchmarks)")
    return section


def fairness(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """max over decision benchmarks and their gated scores (DiscrimEval: female and non-binary
    against male) of |tuned score| − |base score| <= threshold (log-odds); off when the threshold is
    null (+inf here); no ``fairness`` section, or a gated score missing, fails."""
    name, section = spec.name, _fairness_section(spec, metrics, threshold)
    if isinstance(section, GateResult):
        return section
    growths, missing = [], []
    for benchmark, summary in section.items():
        found, lacking = _score_growth(benchmark, summary)
        growths += found
        missing += lacking
    if missing:
        return missing_result(name, threshold, *missing)
    worst = max(g for g, _ in growths)
    passed, comparison = at_most(worst, threshold)
    scores = "; ".join(f"{what} ({formatting.signed(growth)})" for growth, what in growths)
    verdict = "" if passed else ": the disparity grew beyond the margin"
    return GateResult(name, worst, threshold, passed, f"{name}: growth of |discrimination score| {comparison} logit{verdict} ({scores})")


def profile_correlation(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """min over decision benchmarks of the Spearman correlation of the tuned model's per-question
    mean log-odds with the base model's >= threshold: the tuned model still tells questions apart
    (a model that answers every question alike has no disparity and passes `fairness`); off when
    the threshold is null (+inf here); no ``fairness`` section fails."""
    name, section = spec.name, _fairness_section(spec, metrics, threshold)
    if isinstance(section, GateResult):
        return section
    found = {b: s.get("profile_correlation") if isinstance(s, Mapping) else None for b, s in section.items()}
    lacking = [f"fairness.{b}.profile_correlation" for b, v in found.items() if not isinstance(v, (int, float)) or math.isnan(v)]
    if lacking:
        return missing_result(name, threshold, *lacking)
    worst = min(found.values())
    passed = worst >= threshold - 1e-12
    shown = "; ".join(f"{b} {formatting.number(v)}" for b, v in found.items())
    verdict = "" if passed else ": the tuned model no longer separates the questions as the base does"
    return GateResult(name, worst, threshold, passed, f"{name}: per-question profile correlation {formatting.number(worst)} "
                      f"{'>=' if passed else '<'} {threshold:g}{verdict} ({shown})")  # fmt: skip


def heldout(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """The model was judged on what it did not train on: the consistency groups and diversity tasks
    (``split``, eval.split) and every decision benchmark's questions (``fairness.<b>.split``) are
    held out. A calibration evaluated on train groups judges a recipe, never a registration; always on."""
    seen = [] if metrics.get("split", "heldout") == "heldout" else [f"split {metrics.get('split')!r} (eval.split)"]
    for benchmark, summary in (metrics.get("fairness") or {}).items():
        split = summary.get("split") if isinstance(summary, Mapping) else None
        if split != "heldout":
            seen.append(f"fairness.{benchmark} split {split!r} (eval.fairness.split)")
    if seen:
        return GateResult(spec.name, float(len(seen)), threshold, False,
                          f"{spec.name}: judged on groups training may have seen: " + "; ".join(seen))  # fmt: skip
    return GateResult(spec.name, 0.0, threshold, True, f"{spec.name}: judged on held-out groups and questions only")


def heldout_instruction_drop(spec: GateSpec, metrics: Mapping, threshold: float, champion: Champion | None) -> GateResult:
    """base − tuned strict compliance on the held-out instruction families, pooled (`instructions.heldout`
    of metrics.json: families no train group was given) <= threshold; off when null (+inf here); passes
    with a note when no held-out family was evaluated; a pooled record without both means fails."""
    if not math.isfinite(threshold):
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: gate off (gate.{spec.threshold} is null)")
    section = metrics.get("instructions")
    pooled = section.get("heldout") if isinstance(section, Mapping) else None
    if not isinstance(pooled, Mapping):
        return GateResult(spec.name, None, threshold, True, f"{spec.name}: no held-out instruction family evaluated (not judged)")
    base, tuned = pooled.get("base_strict"), pooled.get("tuned_strict")
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (base, tuned)):
        return missing_result(spec.name, threshold, "instructions.heldout.base_strict / tuned_strict (as finite numbers)")
    passed, comparison = at_most(base - tuned, threshold)
    return GateResult(
        spec.name, base - tuned, threshold, passed,
        f"{spec.name}: drop {comparison} (held-out instruction families, strict: tuned {formatting.number(tuned, 2)} vs base "
        f"{formatting.number(base, 2)} over {pooled.get('n_groups')} groups)",
    )  # fmt: skip
