"""The parts every gate is made of: a gate's result, the decision of all of them, a row of the gate
table (`GateSpec`) and how a row is applied (`judge`), and the reading of the evaluation summary the
measures share (its keys, a value as a number, a value against its threshold up to float rounding).
The table itself and what each gate measures: `components.release.gate`."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, asdict, dataclass

from components.config import GateConfig
from components.contracts.summary import SECTIONS, ConsistencySummary, EvaluationSummary
from components.contracts.version_tags import Champion
from components.formatting import number, significant

SLACK = 1e-12
MISSING = object()


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

    def verdicts(self) -> dict[str, bool]:
        """Gate name -> passed."""
        return {r.name: r.passed for r in self.results}


Metrics = EvaluationSummary | Mapping


def as_mapping(metrics: Metrics) -> Mapping:
    """The summary as the dict of metrics.json (absent fields absent), or the dict given."""
    return metrics.to_dict() if isinstance(metrics, EvaluationSummary) else metrics


# --- reading the summary --------------------------------------------------------------------------

summary_key = ConsistencySummary.key
AXIS, N_GROUPS, VALID, INVALID_REASON, MAX_NEW_TOKENS = map(summary_key, ("axis", "n_groups", "valid", "invalid_reason", "max_new_tokens"))
MAX_SENTENCES = summary_key("max_sentences")
BASE_GAP, TUNED_GAP, RELATIVE = map(summary_key, ("base_mean_gap", "tuned_mean_gap", "relative_gap_reduction"))
P_VALUE, Q_VALUE = summary_key("p_value"), summary_key("q_value")
N_TASKS = SECTIONS["diversity"].key("n_tasks")


def get_metric(metrics: Mapping, section: str, key: str) -> object:
    part = metrics.get(section)
    return part.get(key, MISSING) if isinstance(part, Mapping) else MISSING


def as_number(value: object) -> float | None:
    """The value as a float when it is a real number (not bool), else None."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def shown_pair(value: float, threshold: float) -> tuple[str, str]:
    """Format value and threshold with 2 decimals, or more when 2 would hide their difference."""
    shown = number(float(value), 2), number(float(threshold), 2)
    if shown[0] == shown[1] and abs(value - threshold) > SLACK:
        shown = significant(value), significant(threshold)
    return shown


def within(value: float, threshold: float) -> bool:
    """value <= threshold up to float rounding (`SLACK`)."""
    return value <= threshold + SLACK


def at_most(value: float, threshold: float) -> tuple[bool, str]:
    """(value <= threshold, "value <= threshold" or "value > threshold" as shown by `shown_pair`)."""
    passed = within(value, threshold)
    shown, limit = shown_pair(value, threshold)
    return passed, f"{shown} {'<=' if passed else '>'} {limit}"


def missing_result(name: str, threshold: float, *keys: str) -> GateResult:
    return GateResult(name, None, threshold, False, f"{name}: metrics lack {', '.join(keys)}")


def base_and_tuned(metrics: Mapping, section: str, base_key: str, tuned_key: str) -> tuple[float, float] | None:
    """`<section>.<base_key>` and `<tuned_key>` when both are finite numbers, else None."""
    base, tuned = as_number(get_metric(metrics, section, base_key)), as_number(get_metric(metrics, section, tuned_key))
    if base is None or tuned is None or not (math.isfinite(base) and math.isfinite(tuned)):
        return None
    return base, tuned


# --- a row of the table and how it is applied ------------------------------------------------------


Measure = Callable[["GateSpec", Mapping, float, "Champion | None"], GateResult]


@dataclass(frozen=True)
class GateSpec:
    """One gate: its `measure` judges `section`'s `metric` (a field of the summary contract; for
    a base/tuned pair, the name after ``base_`` / ``tuned_``) against `GateConfig.<threshold>`
    (None: 0), worse in the direction `higher_is_better` says; `what` names it in the reason."""

    name: str
    measure: Measure
    _: KW_ONLY  # the rest by keyword: a row of the table reads as what it sets
    section: str = ""
    metric: str = ""
    threshold: str | None = None
    higher_is_better: bool = True
    what: str = ""
    pair: bool = True  # base/tuned pair; False: one field (the champion gates)

    def __post_init__(self) -> None:
        if self.threshold is not None and self.threshold not in GateConfig.model_fields:
            raise KeyError(f"gate {self.name!r}: GateConfig has no field {self.threshold!r}")
        self.keys()  # a field the contract does not have fails here, on import

    def keys(self) -> tuple[str, ...]:
        """The metrics.json keys the gate reads in its section (base, tuned; or the one field)."""
        if not self.section:
            return ()
        record = SECTIONS[self.section]
        return (record.key(f"base_{self.metric}"), record.key(f"tuned_{self.metric}")) if self.pair else (record.key(self.metric),)

    def limit(self, gate: GateConfig) -> float:
        """The threshold's value (a bool, such as require_significance, as 1.0 / 0.0; a null
        threshold, a gate switched off, as +inf)."""
        if self.threshold is None:
            return 0.0
        value = getattr(gate, self.threshold)
        return math.inf if value is None else float(value)


DEFAULT_SIGNIFICANCE = 0.01  # EvalConfig.significance_level's default: for metrics written without `alpha`


def judge(spec: GateSpec, metrics: Metrics, gate: GateConfig, champion: Champion | None = None) -> GateResult:
    """Apply one gate of the table to the summary (or its dict)."""
    return spec.measure(spec, as_mapping(metrics), spec.limit(gate), champion)
