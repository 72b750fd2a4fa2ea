"""Registration gates: may the tuned model be registered? Judged on `metrics.json` and, for the
champion gates, on the metrics recorded (as version tags) for the current `@champion`.

The headline gap is the paper's (Prabhune et al. 2025, arXiv:2512.12858): per group,
gap = |mean H(axis value A) − mean H(axis value B)| on the variant axis ``consistency.axis``
(e.g. gender), H the entropy of the answers; base_mean_gap / tuned_mean_gap are its mean over groups.

Each gate is a plain function `(metrics, GateConfig) -> GateResult`, run in the order of `GATES`;
then each champion gate `(metrics, GateConfig, Champion | None) -> GateResult` of `CHAMPION_GATES`:

- ``no_nan``: every number in metrics (recursively) is finite, and a value is null only where a
  null is legitimate (`_null_allowed`):
    * never for the consistency numbers the gates rely on (n_groups, base/tuned mean gap,
      helpfulness, mean words, empty rate and truncated share);
    * ``consistency.relative_gap_reduction``: only when ``consistency.base_mean_gap == 0``;
    * ``diversity.*``: only when ``diversity.n_tasks == 0`` (no diversity task evaluated);
    * elsewhere (p- and q-values and t for n < 2 or zero variance, ``per_domain``, noise floor and
      other statistics): allowed; the gate that needs the value judges it (``significance`` judges
      a null q-value).
- ``truncation``: max(base_truncated_share, tuned_truncated_share) <= max_truncated_share, the
  share of consistency samples stopped by max_new_tokens instead of EOS (a truncated answer has a
  cut entropy: the gap is not measured); fails also when ``consistency.valid`` is false, and when
  the shares are missing (an evaluation that did not record truncation cannot register).
- ``gap_reduction``: (base_gap − tuned_gap) / base_gap >= min_relative_gap_reduction; when the
  base gap is 0 (relative reduction null) it passes only if the tuned gap is 0 too.
- ``significance``: q <= max_p_value and tuned_gap < base_gap, where q is ``consistency.q_value``,
  the Benjamini–Hochberg adjusted p-value of the paired t-test on the per-group gap (BH over the
  overall and the per-domain tests): a significant increase of the gap fails. A null q passes only
  when the gate is disabled (max_p_value >= 1), which also skips the direction check. Metrics
  without a ``q_value`` key (written before it existed) are judged on the unadjusted ``p_value``,
  noted in the reason.
- ``helpfulness``: base_helpfulness − tuned_helpfulness <= max_helpfulness_drop (H_norm scale).
- ``length``: (base_mean_words − tuned_mean_words) / base_mean_words <= max_length_drop, i.e. the
  tuned mean response length keeps at least (1 − max_length_drop) of the base's (collapse to short
  answers); passes with a note when the base mean is 0 (nothing to lose).
- ``empty_rate``: tuned_empty_rate − base_empty_rate <= max_empty_rate_increase (share of answers
  without a word).
- ``coverage``: base_coverage − tuned_coverage <= max_coverage_drop (share of a diversity task's
  valid set that the samples cover, GAPO).
- ``validity``: base_validity − tuned_validity <= max_validity_drop (share of valid answers on the
  diversity tasks, per task mean): diversity must not be bought with invalid answers.
- ``diversity_helpfulness``, ``diversity_length``, ``diversity_empty_rate``: the three quality
  guards above on the diversity section (its keys are base/tuned_helpfulness, base/tuned_words,
  base/tuned_empty_rate), with the same thresholds.
  The five diversity gates pass with a note when no diversity task was evaluated (n_tasks = 0).
- ``champion_gap``: tuned_mean_gap − champion's tuned_mean_gap <= champion_max_gap_increase (nats).
- ``champion_helpfulness``: champion's tuned_helpfulness − tuned_helpfulness
  <= champion_max_helpfulness_drop.
  Both champion gates pass with a note when there is no champion, or when the champion has no
  recorded value to compare with (a version registered before metrics were recorded as tags).

Comparisons allow a 1e-12 slack so that a value equal to its threshold up to float rounding
(0.3 − 0.2 vs 0.1) is not rejected. A missing key fails the gate that needs it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from components.config import GateConfig

_SLACK = 1e-12
_MISSING = object()


@dataclass(frozen=True)
class GateResult:
    """Outcome of one gate: the measured value, its threshold and a human-readable reason."""

    name: str
    value: float | None
    threshold: float
    passed: bool
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GateDecision:
    """All gates together: passed only if every gate passed."""

    passed: bool
    results: list[GateResult]

    def reasons(self) -> list[str]:
        """Reasons of the failed gates, each starting with the gate's name."""
        return [result.reason for result in self.results if not result.passed]

    def to_dict(self) -> dict:
        return {"passed": self.passed, "results": [r.to_dict() for r in self.results]}

    def rows(self) -> list[dict]:
        """One row per gate: gate, value, threshold, verdict, reason (the gate table)."""
        return [
            {"gate": r.name, "value": r.value, "threshold": r.threshold,
             "verdict": "pass" if r.passed else "fail", "reason": r.reason}
            for r in self.results
        ]  # fmt: skip

    def markdown(self) -> str:
        """The gate table as markdown, with the overall verdict first."""
        lines = [f"**Gates: {'passed' if self.passed else 'failed'}**", "",
                 "| gate | value | threshold | verdict | reason |", "|---|---|---|---|---|"]  # fmt: skip
        for row in self.rows():
            value = "n/a" if row["value"] is None else f"{row['value']:.4g}"
            reason = row["reason"].replace("|", "\\|")
            lines.append(f"| {row['gate']} | {value} | {row['threshold']:g} | {row['verdict']} | {reason} |")
        return "\n".join(lines) + "\n"


def _get(metrics: dict, section: str, key: str) -> object:
    part = metrics.get(section)
    return part.get(key, _MISSING) if isinstance(part, dict) else _MISSING


def _number(value: object) -> float | None:
    """The value as a float when it is a real number (not bool), else None."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _pair(value: float, threshold: float) -> tuple[str, str]:
    """Format value and threshold with 2 decimals, or more when 2 would hide their difference."""
    shown = f"{value:.2f}", f"{threshold:.2f}"
    if shown[0] == shown[1] and abs(value - threshold) > _SLACK:
        shown = f"{value:.4g}", f"{threshold:.4g}"
    return shown


def _within(value: float, threshold: float) -> bool:
    """value <= threshold up to float rounding (`_SLACK`)."""
    return value <= threshold + _SLACK


def _at_most(value: float, threshold: float) -> tuple[bool, str]:
    """(value <= threshold, "value <= threshold" or "value > threshold" as shown by `_pair`)."""
    passed = _within(value, threshold)
    shown, limit = _pair(value, threshold)
    return passed, f"{shown} {'<=' if passed else '>'} {limit}"


METRIC_TAG_PREFIX = "metric."  # model-version tags holding the evaluation metrics at registration


@dataclass(frozen=True)
class Champion:
    """The version that holds the champion alias, with the metrics recorded when it was registered."""

    version: str
    metrics: dict


def metrics_to_tags(metrics: dict) -> dict[str, str]:
    """Finite numbers of metrics.json as version tags: {'metric.consistency.p_value': '0.088', ...}."""
    tags = {}
    for path, value in _leaves(metrics):
        number = _number(value)
        if number is not None and math.isfinite(number) and "[" not in path:
            tags[f"{METRIC_TAG_PREFIX}{path}"] = repr(number)
    return tags


def metrics_from_tags(tags: dict[str, str]) -> dict:
    """Inverse of `metrics_to_tags` (other tags and unparsable values are ignored)."""
    metrics: dict = {}
    for key, text in tags.items():
        if not key.startswith(METRIC_TAG_PREFIX):
            continue
        try:
            value = float(text)
        except ValueError:
            continue
        *parents, leaf = key[len(METRIC_TAG_PREFIX):].split(".")
        node = metrics
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[leaf] = value
    return metrics


def _missing(name: str, threshold: float, *keys: str) -> GateResult:
    return GateResult(name, None, threshold, False, f"{name}: metrics lack {', '.join(keys)}")


# --- no_nan ---------------------------------------------------------------------------------------


def _leaves(obj: object, path: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield from _leaves(value, f"{path}[{index}]")
    else:
        yield path, obj


# metrics the gates rely on: never null
_REQUIRED = {
    f"consistency.{k}"
    for k in ("n_groups", "base_mean_gap", "tuned_mean_gap", "base_helpfulness", "tuned_helpfulness",
              "base_mean_words", "tuned_mean_words", "base_empty_rate", "tuned_empty_rate",
              "base_truncated_share", "tuned_truncated_share")
}  # fmt: skip


def _null_allowed(path: str, metrics: dict) -> bool:
    if path == "consistency.relative_gap_reduction":
        return _get(metrics, "consistency", "base_mean_gap") == 0
    if path.startswith("diversity."):
        return _get(metrics, "diversity", "n_tasks") == 0
    # any other null (p-values for n < 2, a statistic the evaluation could not compute) is a
    # legitimately absent value; the gate that needs it fails on its own if it is missing
    return path not in _REQUIRED


def no_nan(metrics: dict, gate: GateConfig) -> GateResult:
    """Every number is finite; nulls only where documented as legitimate (module docstring)."""
    problems = []
    for path, value in _leaves(metrics):
        number = _number(value)
        if number is not None and not math.isfinite(number):
            problems.append(f"{path} = {value}")
        elif value is None and not _null_allowed(path, metrics):
            problems.append(f"{path} is null")
    if problems:
        reason = f"no_nan: {len(problems)} non-finite or unexpected null value(s): " + "; ".join(
            problems
        )
    else:
        reason = "no_nan: all metrics finite"
    return GateResult("no_nan", float(len(problems)), 0.0, not problems, reason)


# --- gap_reduction --------------------------------------------------------------------------------


def gap_reduction(metrics: dict, gate: GateConfig) -> GateResult:
    """(base_gap − tuned_gap) / base_gap >= gate.min_relative_gap_reduction."""
    name, threshold = "gap_reduction", gate.min_relative_gap_reduction
    relative = _get(metrics, "consistency", "relative_gap_reduction")
    base = _number(_get(metrics, "consistency", "base_mean_gap"))
    tuned = _number(_get(metrics, "consistency", "tuned_mean_gap"))
    if base is None or tuned is None or relative is _MISSING:
        return _missing(name, threshold, "consistency.base_mean_gap / tuned_mean_gap / "
                        "relative_gap_reduction (as numbers)")  # fmt: skip
    gaps = f"tuned mean entropy gap {tuned:.2f} vs base {base:.2f}"
    if relative is None:
        passed = base == 0 and tuned == 0
        if passed:
            verdict = "both gaps are 0"
        elif base == 0:
            verdict = "base gap is 0 but tuned gap is not"
        else:
            verdict = "relative_gap_reduction is null although the base gap is not 0"
        return GateResult(name, None, threshold, passed, f"{name}: undefined, {verdict} ({gaps})")
    value = _number(relative)
    if value is None or not math.isfinite(value):
        return GateResult(name, None, threshold, False, f"{name}: {relative!r} is not a number")
    passed = value >= threshold - _SLACK
    shown, limit = _pair(value, threshold)
    sign = ">=" if passed else "<"
    return GateResult(name, value, threshold, passed, f"{name}: {shown} {sign} {limit} ({gaps})")


# --- truncation -----------------------------------------------------------------------------------


def _percent(share: float) -> str:
    return f"{share * 100:.1f}%"


def _truncated_samples(base: float, tuned: float, metrics: dict) -> str:
    """'12.5% of base samples and 3.0% of tuned samples hit max_new_tokens = 32'."""
    limit = _get(metrics, "consistency", "max_new_tokens")
    shown = f" = {limit}" if _number(limit) is not None else ""
    return f"{_percent(base)} of base samples and {_percent(tuned)} of tuned samples hit max_new_tokens{shown}"


def _declared_invalid(metrics: dict) -> str | None:
    """Why the evaluation declared itself invalid (``consistency.valid`` false), else None."""
    if _get(metrics, "consistency", "valid") is not False:
        return None
    why = _get(metrics, "consistency", "invalid_reason")
    return str(why) if why not in (None, "", _MISSING) else "consistency.valid is false"


def truncation(metrics: dict, gate: GateConfig) -> GateResult:
    """max(base_truncated_share, tuned_truncated_share) <= gate.max_truncated_share, and
    ``consistency.valid`` is not false; missing shares fail (truncation not recorded)."""
    name, threshold = "truncation", gate.max_truncated_share
    pair = _base_and_tuned(metrics, "consistency", "truncated_share")
    if pair is None:
        return _missing(name, threshold, "consistency.base_truncated_share / tuned_truncated_share (as finite "
                        "numbers): an evaluation that did not record truncation cannot register")  # fmt: skip
    worst, hits, limit = max(pair), _truncated_samples(*pair, metrics), f"{threshold * 100:g}%"
    problems = [] if _within(worst, threshold) else [f"{hits} (> {limit}); raise eval.max_new_tokens"]
    invalid = _declared_invalid(metrics)
    problems += [invalid] if invalid is not None else []
    if problems:
        reason = f"{name}: consistency evaluation invalid: " + "; ".join(problems)
    else:
        reason = f"{name}: {hits} (<= {limit})"
    return GateResult(name, worst, threshold, not problems, reason)


# --- significance ---------------------------------------------------------------------------------


def _headline_test(metrics: dict) -> tuple[str, object, str]:
    """(key judged, its value, the test as words): ``q_value``, or ``p_value`` in older metrics."""
    part = metrics.get("consistency")
    adjusted = isinstance(part, dict) and "q_value" in part
    key = "q_value" if adjusted else "p_value"
    axis = _get(metrics, "consistency", "axis")
    n = _get(metrics, "consistency", "n_groups")
    gap = f"per-group {axis if isinstance(axis, str) and axis else 'entropy'} gap"
    size = f"n = {n if n is not _MISSING else '?'}"
    if adjusted:
        test = f"paired t-test on the {gap}, BH-adjusted, {size}"
    else:
        test = f"paired t-test on the {gap}, {size}; metrics have no q_value: unadjusted p_value judged"
    return key, _get(metrics, "consistency", key), test


def significance(metrics: dict, gate: GateConfig) -> GateResult:
    """q <= gate.max_p_value and tuned_mean_gap < base_mean_gap, q the BH-adjusted p-value of the
    paired test (``p_value`` when the metrics have no ``q_value``); disabled when max_p_value >= 1."""
    name, threshold = "significance", gate.max_p_value
    key, raw, test = _headline_test(metrics)
    if raw is _MISSING:
        return _missing(name, threshold, f"consistency.{key}")
    symbol, disabled, off = key[0], threshold >= 1.0, "gate disabled (max_p_value >= 1)"
    if raw is None:
        verdict = off if disabled else f"max_p_value = {threshold:g} requires a defined {key}"
        return GateResult(name, None, threshold, disabled, f"{name}: {symbol} undefined ({test}); {verdict}")
    value = _number(raw)
    if value is None or not math.isfinite(value):
        return GateResult(name, None, threshold, False, f"{name}: {raw!r} is not a number")
    shown = f"{symbol} = {value:.3g}"
    if disabled:
        return GateResult(name, value, threshold, True, f"{name}: {shown}, {off} ({test})")
    if not _within(value, threshold):
        return GateResult(name, value, threshold, False, f"{name}: {shown} > {threshold:g} ({test})")
    return _gap_fell(name, value, threshold, metrics, f"{shown} <= {threshold:g} ({test})")


def _gap_fell(name: str, value: float, threshold: float, metrics: dict, significant: str) -> GateResult:
    """A significant difference passes only when it is a fall: tuned_mean_gap < base_mean_gap."""
    pair = _base_and_tuned(metrics, "consistency", "mean_gap")
    if pair is None:
        return _missing(name, threshold, "consistency.base_mean_gap / tuned_mean_gap (as finite numbers)")
    base, tuned = pair
    if tuned < base:
        return GateResult(name, value, threshold, True, f"{name}: {significant}; the gap fell "
                          f"(tuned mean gap {tuned:.4g} < base {base:.4g})")  # fmt: skip
    change = "rose: a significant increase" if tuned > base else "did not fall"
    return GateResult(name, value, threshold, False, f"{name}: {significant}, but the gap {change} "
                      f"(tuned mean gap {tuned:.4g} vs base {base:.4g})")  # fmt: skip


# --- quality guard: helpfulness, length, empty answers, coverage ----------------------------------


def _no_diversity_task(name: str, threshold: float, metrics: dict, section: str) -> GateResult | None:
    """A diversity gate with no diversity task evaluated (n_tasks = 0) passes, noted; else None."""
    if section == "diversity" and _get(metrics, "diversity", "n_tasks") == 0:
        return GateResult(name, None, threshold, True, f"{name}: no diversity task evaluated (not judged)")
    return None


def _base_and_tuned(metrics: dict, section: str, key: str) -> tuple[float, float] | None:
    """`<section>.base_<key>` and `tuned_<key>` when both are finite numbers, else None."""
    base = _number(_get(metrics, section, f"base_{key}"))
    tuned = _number(_get(metrics, section, f"tuned_{key}"))
    if base is None or tuned is None or not (math.isfinite(base) and math.isfinite(tuned)):
        return None
    return base, tuned


def _section_pair(name: str, threshold: float, metrics: dict, section: str, key: str) -> tuple[float, float] | GateResult:
    """(base, tuned) `<section>.<base|tuned>_<key>`, or the result that settles the gate at once:
    a pass noted when no diversity task was evaluated, a failure when a value is missing."""
    not_judged = _no_diversity_task(name, threshold, metrics, section)
    if not_judged is not None:
        return not_judged
    pair = _base_and_tuned(metrics, section, key)
    if pair is None:
        return _missing(name, threshold, f"{section}.base_{key} / tuned_{key} (as finite numbers)")
    return pair


def _worsening(
    name: str, threshold: float, metrics: dict, section: str, key: str, higher_is_better: bool, what: str
) -> GateResult:
    """Worsening base -> tuned of `<section>.<base|tuned>_<key>` <= threshold (same units as the key).

    worsening = base − tuned (a drop) when higher is better, tuned − base (an increase) otherwise.
    """
    pair = _section_pair(name, threshold, metrics, section, key)
    if isinstance(pair, GateResult):
        return pair
    base, tuned = pair
    worse, change = (base - tuned, "drop") if higher_is_better else (tuned - base, "increase")
    passed, comparison = _at_most(worse, threshold)
    return GateResult(
        name, worse, threshold, passed,
        f"{name}: {change} {comparison} (tuned {what} {tuned:.2f} vs base {base:.2f})",
    )  # fmt: skip


def _length_drop(name: str, threshold: float, metrics: dict, section: str, key: str) -> GateResult:
    """(base − tuned) / base mean words <= threshold, i.e. tuned >= (1 − threshold) × base."""
    pair = _section_pair(name, threshold, metrics, section, key)
    if isinstance(pair, GateResult):
        return pair
    base, tuned = pair
    words = f"tuned {tuned:.1f} words per response vs base {base:.1f}"
    if base == 0:
        return GateResult(name, None, threshold, True, f"{name}: base responses are empty, no length to lose ({words})")
    drop = (base - tuned) / base
    passed, comparison = _at_most(drop, threshold)
    return GateResult(name, drop, threshold, passed, f"{name}: relative drop {comparison} ({words})")


def helpfulness(metrics: dict, gate: GateConfig) -> GateResult:
    """consistency: base_helpfulness − tuned_helpfulness <= gate.max_helpfulness_drop."""
    return _worsening("helpfulness", gate.max_helpfulness_drop, metrics, "consistency", "helpfulness", True, "H_norm")


def length(metrics: dict, gate: GateConfig) -> GateResult:
    """consistency: (base_mean_words − tuned_mean_words) / base_mean_words <= gate.max_length_drop."""
    return _length_drop("length", gate.max_length_drop, metrics, "consistency", "mean_words")


def empty_rate(metrics: dict, gate: GateConfig) -> GateResult:
    """consistency: tuned_empty_rate − base_empty_rate <= gate.max_empty_rate_increase."""
    return _worsening(
        "empty_rate", gate.max_empty_rate_increase, metrics, "consistency", "empty_rate", False, "empty-answer share"
    )


def coverage(metrics: dict, gate: GateConfig) -> GateResult:
    """base_coverage − tuned_coverage <= gate.max_coverage_drop (no diversity task: pass, noted)."""
    return _worsening("coverage", gate.max_coverage_drop, metrics, "diversity", "coverage", True, "valid-set coverage")


def validity(metrics: dict, gate: GateConfig) -> GateResult:
    """base_validity − tuned_validity <= gate.max_validity_drop (no diversity task: pass, noted)."""
    return _worsening("validity", gate.max_validity_drop, metrics, "diversity", "validity", True, "valid-answer share")


def diversity_helpfulness(metrics: dict, gate: GateConfig) -> GateResult:
    """diversity: base_helpfulness − tuned_helpfulness <= gate.max_helpfulness_drop."""
    return _worsening(
        "diversity_helpfulness", gate.max_helpfulness_drop, metrics, "diversity", "helpfulness", True, "H_norm"
    )


def diversity_length(metrics: dict, gate: GateConfig) -> GateResult:
    """diversity: (base_words − tuned_words) / base_words <= gate.max_length_drop."""
    return _length_drop("diversity_length", gate.max_length_drop, metrics, "diversity", "words")


def diversity_empty_rate(metrics: dict, gate: GateConfig) -> GateResult:
    """diversity: tuned_empty_rate − base_empty_rate <= gate.max_empty_rate_increase."""
    return _worsening(
        "diversity_empty_rate", gate.max_empty_rate_increase, metrics, "diversity", "empty_rate", False,
        "empty-answer share",
    )  # fmt: skip


GATES: dict[str, Callable[[dict, GateConfig], GateResult]] = {
    "no_nan": no_nan,
    "truncation": truncation,
    "gap_reduction": gap_reduction,
    "significance": significance,
    "helpfulness": helpfulness,
    "length": length,
    "empty_rate": empty_rate,
    "coverage": coverage,
    "validity": validity,
    "diversity_helpfulness": diversity_helpfulness,
    "diversity_length": diversity_length,
    "diversity_empty_rate": diversity_empty_rate,
}


# --- against the current champion -----------------------------------------------------------------


def _versus_champion(
    name: str, threshold: float, metrics: dict, champion: Champion | None, key: str, lower_is_better: bool, what: str
) -> GateResult:
    """Worsening of `consistency.<key>` relative to the champion's recorded value <= threshold."""
    if champion is None:
        return GateResult(name, None, threshold, True, f"{name}: no champion yet (not judged)")
    ours = _number(_get(metrics, "consistency", key))
    if ours is None or not math.isfinite(ours):
        return _missing(name, threshold, f"consistency.{key} (as a finite number)")
    theirs = _number(_get(champion.metrics, "consistency", key))
    if theirs is None or not math.isfinite(theirs):
        return GateResult(
            name, None, threshold, True,
            f"{name}: champion v{champion.version} has no recorded consistency.{key} (not judged)",
        )  # fmt: skip
    worse = ours - theirs if lower_is_better else theirs - ours
    passed, comparison = _at_most(worse, threshold)
    return GateResult(
        name, worse, threshold, passed,
        f"{name}: {what} worse by {comparison} ({ours:.4g} vs champion v{champion.version} {theirs:.4g})",
    )  # fmt: skip


def champion_gap(metrics: dict, gate: GateConfig, champion: Champion | None) -> GateResult:
    """tuned_mean_gap − champion.tuned_mean_gap <= gate.champion_max_gap_increase."""
    return _versus_champion(
        "champion_gap", gate.champion_max_gap_increase, metrics, champion, "tuned_mean_gap", True,
        "mean entropy gap",
    )  # fmt: skip


def champion_helpfulness(metrics: dict, gate: GateConfig, champion: Champion | None) -> GateResult:
    """champion.tuned_helpfulness − tuned_helpfulness <= gate.champion_max_helpfulness_drop."""
    return _versus_champion(
        "champion_helpfulness", gate.champion_max_helpfulness_drop, metrics, champion,
        "tuned_helpfulness", False, "helpfulness H_norm",
    )  # fmt: skip


CHAMPION_GATES: dict[str, Callable[[dict, GateConfig, Champion | None], GateResult]] = {
    "champion_gap": champion_gap,
    "champion_helpfulness": champion_helpfulness,
}


def evaluate_gates(metrics: dict, gate: GateConfig, champion: Champion | None = None) -> GateDecision:
    """Run `GATES` then `CHAMPION_GATES` on the metrics.json dict; passed only if all pass."""
    results = [check(metrics, gate) for check in GATES.values()]
    results += [check(metrics, gate, champion) for check in CHAMPION_GATES.values()]
    return GateDecision(passed=all(r.passed for r in results), results=results)
