"""The version-tag schema: one encoder, one decoder, and the registration and promotion that use them."""

from __future__ import annotations

import json
from pathlib import Path

from components.contracts.summary import finite_numbers, read_summary
from components.contracts.version_tags import (
    NO_CHAMPION,
    GateDetail,
    PromotionRecord,
    Provenance,
    RollbackRecord,
    VersionTags,
)
from components.release.gate import GATES, Champion, evaluate_gates
from components.release.gate_record import registration_tags, run_tags
from components.release.promotion import promotion_check
from tests.unit.test_gate import GATE

ROOT = Path(__file__).resolve().parents[2]
FULL = VersionTags(
    gate_passed=True,
    gates={"no_nan": True, "significance": False},
    gate_details={
        "no_nan": GateDetail(0.0, 0.0, "no_nan: all metrics finite"),
        "significance": GateDetail(None, 0.01, "significance: q undefined | not judged"),
    },
    champion_at_registration="3",
    metrics={"consistency.tuned_mean_gap": 0.3, "consistency.per_domain.job.q_value": 0.004, "diversity.n_tasks": 2.0},
    provenance=Provenance("aa", "bb.dir", "cc", "dd", train_groups=12, train_prompts=40),
    params={
        "train.lr": "0.0002",
        "lora.target_modules": '["q_proj", "v_proj"]',
        "train.loss_type": "grpo",
        "reward.weights.stability": "0.6",
        "model.id": "null",
    },  # fmt: skip
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
    assert (tags["data.train_groups"], tags["data.train_prompts"]) == ("12", "40")
    assert tags["gate.no_nan.value"] == "0.0" and tags["gate.no_nan.threshold"] == "0.0"
    assert tags["gate.no_nan.reason"] == "no_nan: all metrics finite"
    assert "gate.significance.value" not in tags and tags["gate.significance.threshold"] == "0.01"  # undefined: absent
    assert tags["param.train.lr"] == "0.0002" and tags["param.lora.target_modules"] == '["q_proj", "v_proj"]'
    assert tags["param.reward.weights.stability"] == "0.6" and tags["params.hash"] == "cc"  # param.* is not params.*
    assert tags["promotion.forced"] == "false" and tags["promotion.previous_champion"] == "none"
    assert tags["rollback.restored"] == "2" and tags["manifest.digest"] == "0123"
    assert FULL.failed_gates() == ["significance"]
    assert FULL.metrics_tree()["consistency"]["per_domain"]["job"]["q_value"] == 0.004


def test_unparsable_values_are_kept_verbatim_not_decoded():
    tags = {"metric.bad": "x", "gate.note": "maybe", "gate.passed": "TRUE", "promotion.forced": "true"}
    decoded = VersionTags.from_tags(tags)
    assert decoded.gate_passed is True and decoded.promotion == PromotionRecord(forced=True)
    assert decoded.metrics == {} and decoded.other == {"metric.bad": "x", "gate.note": "maybe"}


def test_unparsable_gate_numbers_and_data_sizes_are_kept_verbatim():
    tags = {"gate.no_nan.value": "lots", "gate.no_nan.threshold": "0.5", "gate.no_nan.reason": "pass",
            "data.train_groups": "12.5", "data.train_prompts": "40", "param.train.lr": "x"}  # fmt: skip
    decoded = VersionTags.from_tags(tags)
    assert decoded.gate_details == {"no_nan": GateDetail(None, 0.5, "pass")} and decoded.gates == {}
    assert decoded.provenance == Provenance(train_prompts=40) and decoded.params == {"train.lr": "x"}
    assert decoded.other == {"gate.no_nan.value": "lots", "data.train_groups": "12.5"}
    assert decoded.to_tags() == tags


def test_tags_of_a_version_registered_before_details_decode_without_them():
    old = {"gate.passed": "true", "gate.no_nan": "pass", "data.sha256": "aa", "params.hash": "cc"}
    decoded = VersionTags.from_tags(old)
    assert decoded.gates == {"no_nan": True} and decoded.gate_details == {} and decoded.params == {}
    assert decoded.provenance == Provenance(data_sha256="aa", params_hash="cc") and decoded.to_tags() == old


def test_registration_tags_carry_verdicts_metrics_and_provenance():
    summary = read_summary(ROOT / "results/consistency/arms/grpo/metrics.json")
    decision = evaluate_gates(summary, GATE)
    provenance = Provenance("aa", "bb", "cc", "dd")
    record = registration_tags(decision, None, summary, provenance)
    tags = record.to_tags()
    assert tags["gate.passed"] == str(decision.passed).lower() and tags["gate.champion_at_registration"] == "none"
    assert {f"gate.{name}" for name in GATES} <= set(tags)
    assert float(tags["metric.consistency.tuned_mean_gap"]) == summary.consistency.tuned_mean_gap
    assert "metric.consistency.base_mean_words" in tags  # the file's key, not the field's name
    assert not any(key.startswith("metric.schema_version") for key in tags)
    assert {k: v for k, v in tags.items() if k.startswith("metric.")} == VersionTags(
        metrics=finite_numbers(json.loads((ROOT / "results/consistency/arms/grpo/metrics.json").read_text()))
    ).to_tags()
    # what the champion gates read back from a registered champion
    champion = Champion("1", VersionTags.from_tags(tags).metrics_tree())
    assert champion.metrics["consistency"]["tuned_helpfulness"] == summary.consistency.tuned_helpfulness
    assert record.provenance == provenance and VersionTags.from_tags(tags) == record
    # each gate's value, threshold and reason, as the gate table has them
    for result in decision.results:
        assert tags[f"gate.{result.name}.threshold"] == repr(result.threshold) and tags[f"gate.{result.name}.reason"] == result.reason
        assert tags.get(f"gate.{result.name}.value") == (None if result.value is None else repr(float(result.value)))


def test_registration_records_the_training_params_and_the_data_size(tmp_path):
    from components.config import load_params
    from components.data import build_groups, write_groups
    from components.release.binding import RECORDED_PARAMS, version_params, version_provenance

    params = load_params(ROOT / "params.yaml", profile="smoke")
    recorded = version_params(params)
    assert recorded["seed"] == str(params.seed) and recorded["model.source"] == params.model.source
    assert recorded["lora.r"] == str(params.lora.r) and recorded["lora.target_modules"] == json.dumps(params.lora.target_modules)
    assert recorded["train.steps"] == "2" and recorded["train.samples_per_prompt"] == "3" and recorded["train.max_new_tokens"] == "16"
    assert float(recorded["train.lr"]) == params.train.lr and recorded["train.loss_type"] == params.train.loss_type
    assert recorded["train.advantage.estimator"] == params.train.advantage.estimator and recorded["train.domains"] == "null"
    assert {k: float(v) for k, v in recorded.items() if k.startswith("reward.weights.")} == {
        f"reward.weights.{name}": weight for name, weight in params.reward.weights.items()}  # fmt: skip
    assert recorded["eval.samples_per_prompt"] == "3" and float(recorded["eval.temperature"]) == params.eval.temperature
    assert {path.split(".")[0] for path in recorded} == {path.split(".")[0] for path in RECORDED_PARAMS}

    paths = params.paths.model_copy(update={"groups": tmp_path / "groups"})
    train = params.train.model_copy(update={"domains": ["job"]})
    params = params.model_copy(update={"paths": paths, "train": train})
    assert version_provenance(params).train_groups is None  # no group files: not recorded
    groups = build_groups(ROOT / "data/templates", params.data, params.seed)
    write_groups(groups, paths.groups)
    trained = [g for g in groups if g.split == "train" and g.task == "consistency" and g.domain == "job"]
    provenance = version_provenance(params)
    assert provenance.train_groups == len(trained) > 0
    assert provenance.train_prompts == sum(len(g.members) for g in trained) > len(trained)


def test_promotion_reads_decoded_and_raw_tags_alike():
    passed = VersionTags(gate_passed=True, gates={name: True for name in GATES}, metrics={"consistency.tuned_mean_gap": 0.3})
    assert promotion_check(passed, None, GATE) == promotion_check(passed.to_tags(), None, GATE)
    refused = promotion_check(VersionTags(gate_passed=False, gates={"significance": False}), None, GATE)
    assert refused.reasons() == ["registration_gates: failed (failed: significance)"]


def _card(tags: dict[str, str], tracking_uri: str = "sqlite:///x.db", experiment_id: str | None = None) -> str:
    from types import SimpleNamespace

    from components.tracking.export import model_card

    version = SimpleNamespace(tags=tags, version="3", run_id="r1")
    return model_card("groupwise-test", version, {"source": "tiny", "weights_sha256": "ww"}, tracking_uri, "float32", experiment_id)


def test_the_model_card_reads_the_tags_through_the_codec():
    card = _card(FULL.to_tags())
    for row in ("| passed | true |", "| no_nan | pass |", "| significance | fail |", "| champion_at_registration | 3 |"):
        assert row in card
    assert "| groups files SHA-256 | `aa` |" in card and "| DVC md5 | `bb.dir` |" in card
    assert "| params hash | `cc` |" in card and "| git commit | `dd` |" in card
    assert "| gender gap, base → tuned | n/a → 0.3 |" in card and "| q (BH) | n/a |" in card
    # the training data's size, the params, and each gate's value, threshold and reason
    assert "| training groups (train split, train.tasks / train.domains) | `12` |" in card
    assert "| training prompts (the groups' variants) | `40` |" in card
    assert "| held-out diversity tasks evaluated | 2 |" in card and "| held-out consistency groups evaluated | not recorded |" in card
    for row in ("| train.lr | `0.0002` |", '| lora.target_modules | `["q_proj", "v_proj"]` |', "| train.loss_type | `grpo` |",
                "| reward.weights.stability | `0.6` |", "| model.id | `null` |"):  # fmt: skip
        assert row in card
    assert card.index("| model.id |") < card.index("| train.loss_type |") < card.index("| reward.weights.stability |")
    assert "| gate | verdict | value | threshold | reason |" in card
    assert "| no_nan | pass | 0 | 0 | no_nan: all metrics finite |" in card
    assert "| significance | fail | n/a | 0.01 | significance: q undefined \\| not judged |" in card  # a | escaped
    assert "| MLflow run | run `r1`: `mlflow ui --backend-store-uri sqlite:///x.db` |" in card  # no experiment known
    empty = _card({})
    assert "| gates | none recorded |" in empty and "| groups files SHA-256 | not recorded |" in empty
    assert "| training groups (train split, train.tasks / train.domains) | not recorded |" in empty
    assert "| params | not recorded |" in empty


def test_a_card_of_a_version_registered_before_details_says_not_recorded():
    card = _card({"gate.passed": "true", "gate.no_nan": "pass", "data.sha256": "aa", "params.hash": "cc"})
    assert "| passed | true |" in card and "| groups files SHA-256 | `aa` |" in card and "| params hash | `cc` |" in card
    assert "| no_nan | pass | not recorded | not recorded | not recorded |" in card
    assert "| training prompts (the groups' variants) | not recorded |" in card and "| params | not recorded |" in card


def test_the_run_link_is_the_mlflow_ui_page_on_a_server_and_a_hint_otherwise():
    from components.tracking.export import run_link

    assert run_link("http://mlflow.lan:5000/", "7", "abc") == "http://mlflow.lan:5000/#/experiments/7/runs/abc"
    assert run_link("https://mlflow.example.org", "0", "abc") == "https://mlflow.example.org/#/experiments/0/runs/abc"
    assert run_link("http://mlflow.lan:5000", None, "abc") == "run `abc` on http://mlflow.lan:5000 (its experiment was not found)"
    assert run_link("sqlite:///mlruns/mlflow.db", "1", "abc") == (
        "run `abc`: `mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db`, then http://127.0.0.1:5000/#/experiments/1/runs/abc"
    )
    card = _card(FULL.to_tags(), "http://mlflow.lan:5000", "7")
    assert "| MLflow run | http://mlflow.lan:5000/#/experiments/7/runs/r1 |" in card


def test_the_model_card_shows_every_headline_metric_registration_records():
    """The card's metrics are paths of the summary contract (a renamed field fails on import) that
    registration writes as tags: a registered version's card has no 'n/a' in its headline."""
    from components.tracking.export import CARD_METRICS

    summary = read_summary(ROOT / "results/consistency/arms/grpo/metrics.json")
    # that arm was evaluated before compliance and the length-controlled gap existed: as an evaluation writes them now
    measured = {"base_compliance": 0.7, "tuned_compliance": 0.3, "base_length_controlled_gap": 0.5, "tuned_length_controlled_gap": 0.45}
    summary = summary.model_copy(update={"consistency": summary.consistency.model_copy(update=measured)})
    record = registration_tags(evaluate_gates(summary, GATE), None, summary, Provenance("aa", "bb", "cc", "dd"))
    paths = [path for _, row_paths in CARD_METRICS for path in row_paths]
    assert set(paths) <= set(record.metrics), set(paths) - set(record.metrics)
    card = _card(record.to_tags())
    gap = summary.consistency
    assert f"| gender gap, base → tuned | {gap.base_mean_gap:.3g} → {gap.tuned_mean_gap:.3g} |" in card
    assert f"| q (BH) | {gap.q_value:.3g} |" in card


def test_register_run_tags_are_the_version_tags_gate_record():
    summary = read_summary(ROOT / "results/consistency/arms/grpo/metrics.json")
    decision = evaluate_gates(summary, GATE)
    tags = run_tags(decision)
    assert registration_tags(decision, None, summary, Provenance()).gate_tags() == {**tags, "gate.champion_at_registration": "none"}
    assert tags["gate.passed"] == str(decision.passed).lower()
    assert {k: v for k, v in tags.items() if k != "gate.passed"} == {
        f"gate.{r.name}": "pass" if r.passed else "fail" for r in decision.results
    }
    assert VersionTags.from_tags(tags).gates == decision.verdicts()


def test_the_model_card_gives_the_decision_benchmarks_gender_scores():
    metrics = {"fairness.discrim_eval.scores.gender_female.base_score": 0.044, "fairness.discrim_eval.scores.gender_female.tuned_score": 0.021,
               "fairness.discrim_eval.scores.gender_female.tuned_ci_low": 0.01, "fairness.discrim_eval.scores.gender_female.tuned_ci_high": 0.032,
               "fairness.discrim_eval.scores.race_black.base_score": 0.3}  # fmt: skip
    card = _card(VersionTags(metrics=metrics).to_tags())
    assert "| discrim_eval: female vs male, base → tuned (logit) | +0.044 → +0.021 (95 % CI +0.010 to +0.032) |" in card
    assert "race" not in card.split("## Headline metrics")[1].split("## Tracking")[0]
    assert "| decision benchmark (DiscrimEval) | not recorded |" in _card({})
