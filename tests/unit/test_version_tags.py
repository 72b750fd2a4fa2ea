"""The version-tag schema: one encoder, one decoder, and the registration and promotion that use them."""

from __future__ import annotations

import json
from pathlib import Path

from components.contracts.summary import read_summary
from components.contracts.version_tags import (
    NO_CHAMPION,
    PromotionRecord,
    Provenance,
    RollbackRecord,
    VersionTags,
)
from components.registry.gate import GATES, Champion, evaluate_gates, metrics_to_tags, registration_tags
from components.registry.promotion import promotion_check
from tests.unit.test_gate import GATE

ROOT = Path(__file__).resolve().parents[2]
FULL = VersionTags(
    gate_passed=True,
    gates={"no_nan": True, "significance": False},
    champion_at_registration="3",
    metrics={"consistency.tuned_mean_gap": 0.3, "consistency.per_domain.job.q_value": 0.004, "diversity.n_tasks": 2.0},
    provenance=Provenance("aa", "bb.dir", "cc", "dd"),
    fingerprint="f" * 32,
    promotion=PromotionRecord("alice", "2026-11-23T10:00:00+00:00", "better gap", False, NO_CHAMPION, "pass"),
    rollback=RollbackRecord("bob", "2026-11-24T10:00:00+00:00", "regression", "2"),
    other={"manifest.digest": "0123", "mlflow.source": "x"},
)


def test_round_trip_both_ways():
    tags = FULL.to_tags()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
    assert VersionTags.from_tags(tags) == FULL
    assert VersionTags.from_tags(tags).to_tags() == tags
    assert VersionTags.from_tags({}) == VersionTags() and VersionTags().to_tags() == {}


def test_the_schema_key_by_key():
    tags = FULL.to_tags()
    assert tags["gate.passed"] == "true" and tags["gate.no_nan"] == "pass" and tags["gate.significance"] == "fail"
    assert tags["gate.champion_at_registration"] == "3"
    assert tags["metric.consistency.per_domain.job.q_value"] == "0.004" and tags["metric.diversity.n_tasks"] == "2.0"
    assert (tags["data.sha256"], tags["data.dvc_md5"], tags["params.hash"], tags["git.commit"]) == ("aa", "bb.dir", "cc", "dd")
    assert tags["groupwise.fingerprint"] == "f" * 32
    assert tags["promotion.forced"] == "false" and tags["promotion.previous_champion"] == "none"
    assert tags["rollback.restored"] == "2" and tags["manifest.digest"] == "0123"
    assert FULL.failed_gates() == ["significance"]
    assert FULL.metrics_tree()["consistency"]["per_domain"]["job"]["q_value"] == 0.004


def test_unparsable_values_are_kept_verbatim_not_decoded():
    tags = {"metric.bad": "x", "gate.note": "maybe", "gate.passed": "TRUE", "promotion.forced": "true"}
    decoded = VersionTags.from_tags(tags)
    assert decoded.gate_passed is True and decoded.promotion == PromotionRecord(forced=True)
    assert decoded.metrics == {} and decoded.other == {"metric.bad": "x", "gate.note": "maybe"}


def test_registration_tags_carry_verdicts_metrics_and_provenance():
    summary = read_summary(ROOT / "results/study/grpo/metrics.json")
    decision = evaluate_gates(summary, GATE)
    provenance = Provenance("aa", "bb", "cc", "dd")
    record = registration_tags(decision, None, summary, provenance)
    tags = record.to_tags()
    assert tags["gate.passed"] == str(decision.passed).lower() and tags["gate.champion_at_registration"] == "none"
    assert {f"gate.{name}" for name in GATES} <= set(tags)
    assert float(tags["metric.consistency.tuned_mean_gap"]) == summary.consistency.tuned_mean_gap
    assert "metric.consistency.base_mean_words" in tags  # the file's key, not the field's name
    assert not any(key.startswith("metric.schema_version") for key in tags)
    assert {k: v for k, v in tags.items() if k.startswith("metric.")} == metrics_to_tags(json.loads((ROOT / "results/study/grpo/metrics.json").read_text()))
    # what the champion gates read back from a registered champion
    champion = Champion("1", VersionTags.from_tags(tags).metrics_tree())
    assert champion.metrics["consistency"]["tuned_helpfulness"] == summary.consistency.tuned_helpfulness
    assert record.provenance == provenance and VersionTags.from_tags(tags) == record


def test_promotion_reads_decoded_and_raw_tags_alike():
    passed = VersionTags(gate_passed=True, gates={name: True for name in GATES}, metrics={"consistency.tuned_mean_gap": 0.3})
    assert promotion_check(passed, None, GATE) == promotion_check(passed.to_tags(), None, GATE)
    refused = promotion_check(VersionTags(gate_passed=False, gates={"significance": False}), None, GATE)
    assert refused.reasons() == ["registration_gates: failed (failed: significance)"]


def _card(tags: dict[str, str]) -> str:
    from types import SimpleNamespace

    from components.tracking.export import model_card

    version = SimpleNamespace(tags=tags, version="3", run_id="r1")
    return model_card("groupwise-test", version, {"source": "tiny", "weights_sha256": "ww"}, "sqlite:///x.db", "float32")


def test_the_model_card_reads_the_tags_through_the_codec():
    card = _card(FULL.to_tags())
    for row in ("| passed | true |", "| no_nan | pass |", "| significance | fail |", "| champion_at_registration | 3 |"):
        assert row in card
    assert "| groups files SHA-256 | `aa` |" in card and "| DVC md5 | `bb.dir` |" in card
    assert "| params hash | `cc` |" in card and "| git commit | `dd` |" in card
    assert "| gender gap, base → tuned | n/a → 0.3 |" in card and "| q (BH) | n/a |" in card
    empty = _card({})
    assert "| gates | none recorded |" in empty and "| groups files SHA-256 | `?` |" in empty


def test_the_model_card_shows_every_headline_metric_registration_records():
    """The card's metrics are paths of the summary contract (a renamed field fails on import) that
    registration writes as tags: a registered version's card has no 'n/a' in its headline."""
    from components.tracking.export import CARD_METRICS

    summary = read_summary(ROOT / "results/study/grpo/metrics.json")
    record = registration_tags(evaluate_gates(summary, GATE), None, summary, Provenance("aa", "bb", "cc", "dd"))
    paths = [path for _, row_paths in CARD_METRICS for path in row_paths]
    assert set(paths) <= set(record.metrics), set(paths) - set(record.metrics)
    card = _card(record.to_tags())
    gap = summary.consistency
    assert f"| gender gap, base → tuned | {gap.base_mean_gap:.3g} → {gap.tuned_mean_gap:.3g} |" in card
    assert f"| q (BH) | {gap.q_value:.3g} |" in card


def test_register_run_tags_are_the_version_tags_gate_record():
    summary = read_summary(ROOT / "results/study/grpo/metrics.json")
    decision = evaluate_gates(summary, GATE)
    tags = decision.run_tags()
    assert registration_tags(decision, None, summary, Provenance()).gate_tags() == {**tags, "gate.champion_at_registration": "none"}
    assert tags["gate.passed"] == str(decision.passed).lower()
    assert {k: v for k, v in tags.items() if k != "gate.passed"} == {f"gate.{r.name}": "pass" if r.passed else "fail" for r in decision.results}
    assert VersionTags.from_tags(tags).gates == decision.verdicts()
