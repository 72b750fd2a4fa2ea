"""Registration gates: may the tuned model be registered? Judged on `metrics.json` alone.

Each gate is a plain function `(metrics, GateConfig) -> GateResult`, run in the order of `GATES`:

- ``no_nan``: every number in metrics (recursively) is finite, and a value is null only where a
  null is legitimate (`_null_allowed`):
    * ``consistency.t_statistic``, ``consistency.p_value``, ``consistency.p_value_wilcoxon``:
      undefined for n < 2 or zero-variance differences (the ``significance`` gate judges a null
      p-value);
    * ``consistency.relative_gap_reduction``: only when ``consistency.base_mean_gap == 0``;
    * ``diversity.*``: only when ``diversity.n_tasks == 0`` (no diversity task evaluated).
- ``gap_reduction``: (base_gap − tuned_gap) / base_gap >= min_relative_gap_reduction; when the
  base gap is 0 (relative reduction null) it passes only if the tuned gap is 0 too.
- ``significance``: paired t-test p_value <= max_p_value; a null p-value passes only when the
  gate is disabled (max_p_value >= 1.0).
- ``helpfulness``: base_helpfulness − tuned_helpfulness <= max_helpfulness_drop (H_norm scale).

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


def _null_allowed(path: str, metrics: dict) -> bool:
    if path in ("consistency.t_statistic", "consistency.p_value", "consistency.p_value_wilcoxon"):
        return True
    if path == "consistency.relative_gap_reduction":
        return _get(metrics, "consistency", "base_mean_gap") == 0
    if path.startswith("diversity."):
        return _get(metrics, "diversity", "n_tasks") == 0
    return False


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


# --- significance ---------------------------------------------------------------------------------


def significance(metrics: dict, gate: GateConfig) -> GateResult:
    """Paired t-test p_value <= gate.max_p_value (null passes only if max_p_value >= 1)."""
    name, threshold = "significance", gate.max_p_value
    p_value = _get(metrics, "consistency", "p_value")
    if p_value is _MISSING:
        return _missing(name, threshold, "consistency.p_value")
    n = _get(metrics, "consistency", "n_groups")
    test = f"paired t-test on per-group entropy gaps, n = {n if n is not _MISSING else '?'}"
    if p_value is None:
        passed = threshold >= 1.0
        verdict = (
            "gate disabled (max_p_value >= 1)"
            if passed
            else f"max_p_value = {threshold:g} requires a defined p-value"
        )
        return GateResult(
            name, None, threshold, passed, f"{name}: p-value undefined ({test}); {verdict}"
        )
    value = _number(p_value)
    if value is None or not math.isfinite(value):
        return GateResult(name, None, threshold, False, f"{name}: {p_value!r} is not a number")
    passed = value <= threshold + _SLACK
    sign = "<=" if passed else ">"
    return GateResult(
        name, value, threshold, passed, f"{name}: p = {value:.3g} {sign} {threshold:g} ({test})"
    )


# --- helpfulness ----------------------------------------------------------------------------------


def helpfulness(metrics: dict, gate: GateConfig) -> GateResult:
    """base_helpfulness − tuned_helpfulness <= gate.max_helpfulness_drop."""
    name, threshold = "helpfulness", gate.max_helpfulness_drop
    base = _number(_get(metrics, "consistency", "base_helpfulness"))
    tuned = _number(_get(metrics, "consistency", "tuned_helpfulness"))
    if base is None or tuned is None or not (math.isfinite(base) and math.isfinite(tuned)):
        return _missing(name, threshold, "consistency.base_helpfulness / tuned_helpfulness "
                        "(as finite numbers)")  # fmt: skip
    drop = base - tuned
    passed = drop <= threshold + _SLACK
    shown, limit = _pair(drop, threshold)
    sign = "<=" if passed else ">"
    return GateResult(
        name,
        drop,
        threshold,
        passed,
        f"{name}: drop {shown} {sign} {limit} (tuned H_norm {tuned:.2f} vs base {base:.2f})",
    )


GATES: dict[str, Callable[[dict, GateConfig], GateResult]] = {
    "no_nan": no_nan,
    "gap_reduction": gap_reduction,
    "significance": significance,
    "helpfulness": helpfulness,
}


def evaluate_gates(metrics: dict, gate: GateConfig) -> GateDecision:
    """Run every gate of `GATES` on the metrics.json dict; passed only if all pass."""
    results = [check(metrics, gate) for check in GATES.values()]
    return GateDecision(passed=all(r.passed for r in results), results=results)
