"""Registration gates on the metrics.json dict: each gate passes and fails; reasons name it."""

from __future__ import annotations

import copy
import json

import pytest

from components.config import GateConfig
from components.registry.gate import GATES, evaluate_gates

GATE = GateConfig(min_relative_gap_reduction=0.0, max_p_value=0.05, max_helpfulness_drop=0.1)


def good_metrics() -> dict:
    return {
        "consistency": {
            "n_groups": 24,
            "base_mean_gap": 0.40,
            "tuned_mean_gap": 0.30,
            "relative_gap_reduction": 0.25,
            "t_statistic": 3.1,
            "p_value": 0.004,
            "p_value_wilcoxon": 0.006,
            "significant": True,
            "base_helpfulness": 0.55,
            "tuned_helpfulness": 0.50,
            "base_mean_words": 30.0,
            "tuned_mean_words": 28.0,
        },
        "diversity": {
            "n_tasks": 2,
            "base_distinct_1": 0.5, "tuned_distinct_1": 0.6,
            "base_distinct_2": 0.7, "tuned_distinct_2": 0.8,
            "base_validity": 0.9, "tuned_validity": 0.9,
            "base_coverage": 0.25, "tuned_coverage": 0.5,
            "base_tv_to_uniform": 0.75, "tuned_tv_to_uniform": 0.4,
        },  # fmt: skip
        "notes": [],
    }


def with_values(section: str, **values) -> dict:
    metrics = copy.deepcopy(good_metrics())
    metrics[section].update(values)
    return metrics


def result(metrics: dict, name: str, gate: GateConfig = GATE):
    decision = evaluate_gates(metrics, gate)
    return decision, next(r for r in decision.results if r.name == name)


def test_good_metrics_pass_every_gate():
    decision = evaluate_gates(good_metrics(), GATE)
    assert decision.passed
    assert [r.name for r in decision.results] == list(GATES) == [
        "no_nan", "gap_reduction", "significance", "helpfulness",
    ]  # fmt: skip
    assert decision.reasons() == []
    json.dumps(decision.to_dict(), allow_nan=False)


# --- no_nan ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("consistency", "tuned_helpfulness", float("nan")),
        ("diversity", "tuned_coverage", float("inf")),
        ("consistency", "base_mean_gap", None),
        ("consistency", "relative_gap_reduction", None),  # base gap is 0.40, not 0
        ("diversity", "base_validity", None),  # n_tasks is 2
    ],
)
def test_no_nan_fails_on_non_finite_or_unexpected_null(section, key, value):
    decision, gate = result(with_values(section, **{key: value}), "no_nan")
    assert not gate.passed and not decision.passed
    assert gate.value >= 1
    assert any(r.startswith("no_nan:") and f"{section}.{key}" in r for r in decision.reasons())


def test_no_nan_allows_documented_nulls():
    metrics = with_values("consistency", t_statistic=None, p_value_wilcoxon=None)
    assert result(metrics, "no_nan")[1].passed
    zero_base = with_values(
        "consistency", base_mean_gap=0.0, tuned_mean_gap=0.0, relative_gap_reduction=None
    )
    assert result(zero_base, "no_nan")[1].passed
    no_tasks = good_metrics()
    no_tasks["diversity"] = {key: None for key in no_tasks["diversity"]} | {"n_tasks": 0}
    assert result(no_tasks, "no_nan")[1].passed


def test_no_nan_looks_inside_lists():
    metrics = good_metrics()
    metrics["notes"] = ["fine", float("nan")]
    decision, gate = result(metrics, "no_nan")
    assert not gate.passed and "notes[1]" in gate.reason


# --- gap_reduction --------------------------------------------------------------------------------


def test_gap_reduction_fails_when_tuned_gap_grows():
    metrics = with_values(
        "consistency", base_mean_gap=0.37, tuned_mean_gap=0.41, relative_gap_reduction=-0.12
    )
    decision, gate = result(metrics, "gap_reduction")
    assert not gate.passed and gate.value == -0.12 and gate.threshold == 0.0
    assert decision.reasons() == [
        "gap_reduction: -0.12 < 0.00 (tuned mean entropy gap 0.41 vs base 0.37)"
    ]


def test_gap_reduction_threshold():
    strict = GATE.model_copy(update={"min_relative_gap_reduction": 0.3})
    decision, gate = result(good_metrics(), "gap_reduction", strict)
    assert not gate.passed
    assert decision.reasons() == [
        "gap_reduction: 0.25 < 0.30 (tuned mean entropy gap 0.30 vs base 0.40)"
    ]
    assert result(good_metrics(), "gap_reduction", GATE)[1].passed


def test_gap_reduction_with_zero_base_gap():
    both_zero = with_values(
        "consistency", base_mean_gap=0.0, tuned_mean_gap=0.0, relative_gap_reduction=None
    )
    assert result(both_zero, "gap_reduction")[1].passed
    tuned_worse = with_values(
        "consistency", base_mean_gap=0.0, tuned_mean_gap=0.1, relative_gap_reduction=None
    )
    decision, gate = result(tuned_worse, "gap_reduction")
    assert not gate.passed and gate.value is None
    assert decision.reasons()[0].startswith("gap_reduction: undefined, base gap is 0")


# --- significance ---------------------------------------------------------------------------------


def test_significance_fails_above_max_p_value():
    decision, gate = result(with_values("consistency", p_value=0.3), "significance")
    assert not gate.passed and gate.value == 0.3 and gate.threshold == 0.05
    assert decision.reasons() == [
        "significance: p = 0.3 > 0.05 (paired t-test on per-group entropy gaps, n = 24)"
    ]


def test_significance_with_null_p_value_passes_only_when_disabled():
    metrics = with_values("consistency", n_groups=1, t_statistic=None, p_value=None)
    decision, gate = result(metrics, "significance")
    assert not gate.passed and decision.reasons()[0].startswith("significance: p-value undefined")
    disabled = GATE.model_copy(update={"max_p_value": 1.0})
    assert result(metrics, "significance", disabled)[1].passed


# --- helpfulness ----------------------------------------------------------------------------------


def test_helpfulness_fails_on_large_drop():
    metrics = with_values("consistency", base_helpfulness=0.55, tuned_helpfulness=0.40)
    decision, gate = result(metrics, "helpfulness")
    assert not gate.passed and gate.value == pytest.approx(0.15)
    assert decision.reasons() == ["helpfulness: drop 0.15 > 0.10 (tuned H_norm 0.40 vs base 0.55)"]


def test_helpfulness_boundary_and_gain_pass():
    at_limit = with_values("consistency", base_helpfulness=0.3, tuned_helpfulness=0.2)
    decision, gate = result(at_limit, "helpfulness")  # 0.3 - 0.2 = 0.09999999999999998
    assert gate.passed
    assert gate.reason == "helpfulness: drop 0.10 <= 0.10 (tuned H_norm 0.20 vs base 0.30)"
    gain = with_values("consistency", base_helpfulness=0.3, tuned_helpfulness=0.9)
    assert result(gain, "helpfulness")[1].passed


# --- decision -------------------------------------------------------------------------------------


def test_missing_consistency_fails_every_gate_that_needs_it():
    metrics = good_metrics()
    del metrics["consistency"]
    decision = evaluate_gates(metrics, GATE)
    assert not decision.passed
    failed = {reason.split(":")[0] for reason in decision.reasons()}
    assert failed == {"gap_reduction", "significance", "helpfulness"}


def test_several_failures_are_all_reported():
    metrics = with_values(
        "consistency", relative_gap_reduction=-0.5, p_value=0.5, tuned_helpfulness=0.1
    )
    decision = evaluate_gates(metrics, GATE)
    assert [reason.split(":")[0] for reason in decision.reasons()] == [
        "gap_reduction", "significance", "helpfulness",
    ]  # fmt: skip
    assert decision.to_dict()["passed"] is False
