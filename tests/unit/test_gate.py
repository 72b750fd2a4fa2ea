"""Registration gates on the metrics.json dict: each gate passes and fails; reasons name it."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import yaml

from components.config import GateConfig
from components.registry.gate import (
    CHAMPION_GATES,
    GATES,
    Champion,
    evaluate_gates,
    metrics_from_tags,
    metrics_to_tags,
)
from components.registry.promotion import promotion_check

GATE = GateConfig(
    min_relative_gap_reduction=0.0,
    max_p_value=0.05,
    max_helpfulness_drop=0.1,
    max_coverage_drop=0.0,
    max_length_drop=0.5,
    max_empty_rate_increase=0.05,
    champion_max_gap_increase=0.02,
    champion_max_helpfulness_drop=0.02,
)


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
            "base_empty_rate": 0.0,
            "tuned_empty_rate": 0.02,
        },
        "diversity": {
            "n_tasks": 2,
            "base_distinct_1": 0.5, "tuned_distinct_1": 0.6,
            "base_distinct_2": 0.7, "tuned_distinct_2": 0.8,
            "base_validity": 0.9, "tuned_validity": 0.9,
            "base_coverage": 0.25, "tuned_coverage": 0.5,
            "base_tv_to_uniform": 0.75, "tuned_tv_to_uniform": 0.4,
            "base_helpfulness": 0.45, "tuned_helpfulness": 0.42,
            "base_words": 6.0, "tuned_words": 5.0,
            "base_empty_rate": 0.0, "tuned_empty_rate": 0.0,
        },  # fmt: skip
        "notes": [],
    }


def with_values(section: str, **values) -> dict:
    metrics = copy.deepcopy(good_metrics())
    metrics[section].update(values)
    return metrics


def result(metrics: dict, name: str, gate: GateConfig = GATE, champion: Champion | None = None):
    decision = evaluate_gates(metrics, gate, champion)
    return decision, next(r for r in decision.results if r.name == name)


def test_good_metrics_pass_every_gate():
    decision = evaluate_gates(good_metrics(), GATE)
    assert decision.passed
    assert [r.name for r in decision.results] == list(GATES) + list(CHAMPION_GATES) == [
        "no_nan", "gap_reduction", "significance", "helpfulness", "length", "empty_rate", "coverage",
        "diversity_helpfulness", "diversity_length", "diversity_empty_rate",
        "champion_gap", "champion_helpfulness",
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


# --- length and empty answers (quality guard) -----------------------------------------------------


def test_length_fails_on_a_collapse_to_short_answers():
    # consistency 30 -> 9 words: (30 - 9) / 30 = 0.7 > 0.5
    decision, gate = result(with_values("consistency", tuned_mean_words=9.0), "length")
    assert not gate.passed and gate.value == pytest.approx(0.7) and gate.threshold == 0.5
    assert decision.reasons() == [
        "length: relative drop 0.70 > 0.50 (tuned 9.0 words per response vs base 30.0)"
    ]
    # diversity 6 -> 1.5 words: (6 - 1.5) / 6 = 0.75 > 0.5
    decision, gate = result(with_values("diversity", tuned_words=1.5), "diversity_length")
    assert not gate.passed and gate.value == pytest.approx(0.75)
    assert decision.reasons() == [
        "diversity_length: relative drop 0.75 > 0.50 (tuned 1.5 words per response vs base 6.0)"
    ]


def test_length_boundary_gain_and_empty_base():
    # exactly half the base length: drop 0.5 = max_length_drop passes; 14.9 words (drop 0.5033) fails
    decision, gate = result(with_values("consistency", tuned_mean_words=15.0), "length")
    assert gate.passed and gate.value == 0.5 and decision.passed
    decision, gate = result(with_values("consistency", tuned_mean_words=14.9), "length")
    assert not gate.passed and gate.value == pytest.approx(0.1 / 30 + 0.5)
    assert gate.reason == "length: relative drop 0.5033 > 0.5 (tuned 14.9 words per response vs base 30.0)"
    # (3.0 - 2.1) / 3.0 = 0.30000000000000016 in floats: at a 0.3 threshold it passes (slack)
    tight = GATE.model_copy(update={"max_length_drop": 0.3})
    rounded = with_values("diversity", base_words=3.0, tuned_words=2.1)
    assert result(rounded, "diversity_length", tight)[1].passed
    assert not result(with_values("diversity", base_words=3.0, tuned_words=2.09), "diversity_length", tight)[1].passed
    # longer answers pass; an empty base has no length to lose
    assert result(with_values("consistency", tuned_mean_words=90.0), "length")[1].value == pytest.approx(-2.0)
    decision, gate = result(with_values("consistency", base_mean_words=0.0, tuned_mean_words=0.0), "length")
    assert gate.passed and gate.value is None and "base responses are empty" in gate.reason


def test_empty_rate_fails_when_empty_answers_increase():
    # consistency 0.05 -> 0.25 empty: +0.20 > 0.05
    metrics = with_values("consistency", base_empty_rate=0.05, tuned_empty_rate=0.25)
    decision, gate = result(metrics, "empty_rate")
    assert not gate.passed and gate.value == pytest.approx(0.2) and gate.threshold == 0.05
    assert decision.reasons() == [
        "empty_rate: increase 0.20 > 0.05 (tuned empty-answer share 0.25 vs base 0.05)"
    ]
    decision, gate = result(with_values("diversity", tuned_empty_rate=0.125), "diversity_empty_rate")
    assert not gate.passed and gate.value == 0.125
    assert [r.split(":")[0] for r in decision.reasons()] == ["diversity_empty_rate"]


def test_empty_rate_boundary_and_decrease():
    # 0.15 - 0.1 = 0.04999999999999999 and 0.35 - 0.3 = 0.04999999999999999: at 0.05, pass
    assert result(with_values("consistency", base_empty_rate=0.1, tuned_empty_rate=0.15), "empty_rate")[1].passed
    assert result(with_values("diversity", base_empty_rate=0.3, tuned_empty_rate=0.35), "diversity_empty_rate")[1].passed
    # 0.1 -> 0.16: +0.06 > 0.05
    decision, gate = result(with_values("consistency", base_empty_rate=0.1, tuned_empty_rate=0.16), "empty_rate")
    assert not gate.passed and gate.reason.startswith("empty_rate: increase 0.06 > 0.05")
    # fewer empty answers than the base: a negative increase
    assert result(with_values("consistency", base_empty_rate=0.5, tuned_empty_rate=0.0), "empty_rate")[1].value == -0.5


def test_diversity_helpfulness_fails_on_large_drop_and_keeps_the_consistency_gate_apart():
    # diversity 0.45 -> 0.30: drop 0.15 > 0.10; the consistency helpfulness gate is not affected
    decision, gate = result(with_values("diversity", tuned_helpfulness=0.30), "diversity_helpfulness")
    assert not gate.passed and gate.value == pytest.approx(0.15) and gate.threshold == 0.1
    assert decision.reasons() == [
        "diversity_helpfulness: drop 0.15 > 0.10 (tuned H_norm 0.30 vs base 0.45)"
    ]
    assert next(r for r in decision.results if r.name == "helpfulness").value == pytest.approx(0.05)


def test_quality_gates_without_diversity_tasks_pass_with_a_note():
    metrics = good_metrics()
    metrics["diversity"] = {key: None for key in metrics["diversity"]} | {"n_tasks": 0}
    decision = evaluate_gates(metrics, GATE)
    assert decision.passed
    for name in ("diversity_helpfulness", "diversity_length", "diversity_empty_rate"):
        gate = next(r for r in decision.results if r.name == name)
        assert gate.passed and gate.value is None
        assert gate.reason == f"{name}: no diversity task evaluated (not judged)"
    # diversity tasks evaluated but a quality key missing: the gate that needs it fails
    missing = good_metrics()
    del missing["diversity"]["tuned_words"]
    decision, gate = result(missing, "diversity_length")
    assert not gate.passed and gate.reason == "diversity_length: metrics lack diversity.base_words / tuned_words (as finite numbers)"


def test_no_nan_requires_the_consistency_quality_numbers():
    decision, gate = result(with_values("consistency", tuned_mean_words=None, tuned_empty_rate=None), "no_nan")
    assert not gate.passed and gate.value == 2
    assert "consistency.tuned_mean_words is null" in gate.reason and "consistency.tuned_empty_rate is null" in gate.reason


def test_quality_gate_failure_registers_nothing(tmp_path):
    """The register step on the repository's default gates: a collapse refuses registration."""
    from mlflow import MlflowClient

    from components.config import load_params
    from flows import steps

    root = Path(__file__).resolve().parents[2]
    gates = yaml.safe_load((root / "params.yaml").read_text())["gate"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"gate": gates}))
    params = load_params(tmp_path / "params.yaml")
    assert (params.gate.max_length_drop, params.gate.max_empty_rate_increase) == (0.5, 0.05)
    metrics = good_metrics()
    metrics["consistency"]["tuned_mean_words"] = 3.0  # (30 - 3) / 30 = 0.9 > 0.5
    metrics["diversity"]["tuned_empty_rate"] = 0.5  # +0.5 > 0.05
    params.paths.reports.mkdir(parents=True)
    (params.paths.reports / "metrics.json").write_text(json.dumps(metrics))

    refused = steps.register(params)  # no adapter on disk: a refusal must not need one

    assert refused.metrics["passed"] is False
    assert [r.split(":")[0] for r in refused.metrics["reasons"]] == ["length", "diversity_empty_rate"]
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert client.search_registered_models() == []
    run = client.get_run(refused.run_id)
    assert run.data.metrics["gate.length.value"] == pytest.approx(0.9)
    assert run.data.metrics["gate.length.threshold"] == 0.5
    assert run.data.tags["gate.length"] == "fail" and run.data.tags["gate.empty_rate"] == "pass"
    assert run.data.tags["gate.diversity_empty_rate"] == "fail" and run.data.tags["gate.passed"] == "false"
    rows = {r["gate"]: r for r in csv.DictReader((params.paths.registry / "gates.csv").open())}
    assert rows["length"]["verdict"] == "fail" and float(rows["length"]["value"]) == pytest.approx(0.9)
    assert rows["diversity_length"]["verdict"] == "pass"
    assert "| diversity_empty_rate | 0.5 | 0.05 | fail |" in (params.paths.registry / "gates.md").read_text()


# --- decision -------------------------------------------------------------------------------------


def test_missing_consistency_fails_every_gate_that_needs_it():
    metrics = good_metrics()
    del metrics["consistency"]
    decision = evaluate_gates(metrics, GATE)
    assert not decision.passed
    failed = {reason.split(":")[0] for reason in decision.reasons()}
    assert failed == {"gap_reduction", "significance", "helpfulness", "length", "empty_rate"}
    # with a champion to compare against, the champion gates need the consistency metrics too
    decision = evaluate_gates(metrics, GATE, Champion("1", good_metrics()))
    failed = {reason.split(":")[0] for reason in decision.reasons()}
    assert failed == {
        "gap_reduction", "significance", "helpfulness", "length", "empty_rate", "champion_gap", "champion_helpfulness",
    }  # fmt: skip


def test_several_failures_are_all_reported():
    metrics = with_values(
        "consistency", relative_gap_reduction=-0.5, p_value=0.5, tuned_helpfulness=0.1,
        tuned_mean_words=5.0, tuned_empty_rate=0.5,
    )  # fmt: skip
    decision = evaluate_gates(metrics, GATE)
    assert [reason.split(":")[0] for reason in decision.reasons()] == [
        "gap_reduction", "significance", "helpfulness", "length", "empty_rate",
    ]  # fmt: skip
    assert decision.to_dict()["passed"] is False


# --- coverage -------------------------------------------------------------------------------------


def test_coverage_fails_when_tuned_covers_less_of_the_valid_set():
    decision, gate = result(with_values("diversity", base_coverage=0.5, tuned_coverage=0.25), "coverage")
    assert not gate.passed and gate.value == pytest.approx(0.25) and gate.threshold == 0.0
    assert "coverage: drop 0.25 > 0.00 (tuned valid-set coverage 0.25 vs base 0.50)" in decision.reasons()
    lenient = GATE.model_copy(update={"max_coverage_drop": 0.3})
    assert result(with_values("diversity", base_coverage=0.5, tuned_coverage=0.25), "coverage", lenient)[1].passed


def test_coverage_without_diversity_tasks_passes_with_a_note():
    metrics = good_metrics()
    metrics["diversity"] = {key: None for key in metrics["diversity"]} | {"n_tasks": 0}
    decision, gate = result(metrics, "coverage")
    assert gate.passed and gate.value is None and "not judged" in gate.reason
    missing = good_metrics()
    del missing["diversity"]["tuned_coverage"]
    assert not result(missing, "coverage")[1].passed


# --- against the champion -------------------------------------------------------------------------


def champion_with(**consistency) -> Champion:
    metrics = good_metrics()
    metrics["consistency"].update(consistency)
    return Champion("3", metrics)


def test_champion_gates_pass_with_a_note_when_there_is_no_champion():
    decision = evaluate_gates(good_metrics(), GATE, None)
    for name in CHAMPION_GATES:
        gate = next(r for r in decision.results if r.name == name)
        assert gate.passed and gate.value is None and gate.reason == f"{name}: no champion yet (not judged)"


def test_champion_gap_fails_when_worse_than_champion_by_more_than_epsilon():
    # ours 0.30, champion 0.25: 0.05 worse > 0.02
    decision, gate = result(good_metrics(), "champion_gap", champion=champion_with(tuned_mean_gap=0.25))
    assert not gate.passed and gate.value == pytest.approx(0.05)
    assert gate.reason == (
        "champion_gap: mean entropy gap worse by 0.05 > 0.02 (0.3 vs champion v3 0.25)"
    )
    # within epsilon (0.29 -> 0.01 worse) and better than the champion both pass
    assert result(good_metrics(), "champion_gap", champion=champion_with(tuned_mean_gap=0.29))[1].passed
    assert result(good_metrics(), "champion_gap", champion=champion_with(tuned_mean_gap=0.5))[1].passed


def test_champion_helpfulness_fails_on_a_drop_beyond_epsilon():
    decision, gate = result(good_metrics(), "champion_helpfulness", champion=champion_with(tuned_helpfulness=0.6))
    assert not gate.passed and gate.value == pytest.approx(0.1)
    assert not decision.passed and decision.reasons()[0].startswith("champion_helpfulness: helpfulness H_norm worse by 0.10")
    assert result(good_metrics(), "champion_helpfulness", champion=champion_with(tuned_helpfulness=0.51))[1].passed


def test_champion_without_recorded_metrics_is_not_judged():
    decision, gate = result(good_metrics(), "champion_gap", champion=Champion("1", {}))
    assert gate.passed and "champion v1 has no recorded consistency.tuned_mean_gap" in gate.reason


def test_metrics_round_trip_through_version_tags():
    metrics = good_metrics()
    tags = metrics_to_tags(metrics)
    assert tags["metric.consistency.p_value"] == "0.004"
    assert "metric.consistency.significant" not in tags  # booleans are not metrics
    back = metrics_from_tags({**tags, "gate.passed": "true", "metric.bad": "x"})
    assert back["consistency"]["tuned_mean_gap"] == 0.30 and back["diversity"]["n_tasks"] == 2.0
    assert "bad" not in back


def test_gate_table_rows_and_markdown():
    decision = evaluate_gates(with_values("consistency", p_value=0.3), GATE)
    rows = decision.rows()
    assert [r["gate"] for r in rows][:4] == ["no_nan", "gap_reduction", "significance", "helpfulness"]
    significance_row = next(r for r in rows if r["gate"] == "significance")
    assert significance_row == {
        "gate": "significance", "value": 0.3, "threshold": 0.05, "verdict": "fail",
        "reason": "significance: p = 0.3 > 0.05 (paired t-test on per-group entropy gaps, n = 24)",
    }  # fmt: skip
    markdown = decision.markdown()
    assert markdown.startswith("**Gates: failed**")
    assert "| significance | 0.3 | 0.05 | fail |" in markdown


# --- promotion check ------------------------------------------------------------------------------


def version_tags(passed: bool = True, **consistency) -> dict[str, str]:
    metrics = good_metrics()
    metrics["consistency"].update(consistency)
    verdicts = {f"gate.{name}": "pass" for name in GATES}
    if not passed:
        verdicts["gate.significance"] = "fail"
    return {"gate.passed": str(passed).lower(), **verdicts, **metrics_to_tags(metrics)}


def test_promotion_needs_passed_registration_gates():
    assert promotion_check(version_tags(), None, GATE).passed
    refused = promotion_check(version_tags(passed=False), None, GATE)
    assert not refused.passed
    assert refused.reasons() == ["registration_gates: failed (failed: significance)"]
    unrecorded = promotion_check({}, None, GATE)
    assert unrecorded.reasons()[0] == "registration_gates: no gate record (tag gate.passed missing)"


def test_promotion_rechecks_against_the_reigning_champion():
    better_champion = Champion("7", metrics_from_tags(version_tags(tuned_mean_gap=0.1)))
    refused = promotion_check(version_tags(), better_champion, GATE)
    assert not refused.passed
    assert [r.split(":")[0] for r in refused.reasons()] == ["champion_gap"]
    assert "champion v7" in refused.reasons()[0]


def test_no_nan_tolerates_nulls_in_new_sections_but_not_nan():
    metrics = good_metrics()
    metrics["engine"] = {"used": "vllm", "fallback_reason": ""}
    metrics["stats"] = {"ci_low": None}
    assert result(metrics, "no_nan")[1].passed
    metrics["stats"]["ci_high"] = float("nan")
    decision, gate = result(metrics, "no_nan")
    assert not gate.passed and "stats.ci_high = nan" in gate.reason
