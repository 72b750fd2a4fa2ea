"""The whole `retrain` flow on the tiny model against real Prefect, MLflow (SQLite) and GX."""

import json

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient
from prefect.artifacts import Artifact

from components.code_version import code_version
from components.config import load_params
from components.release.binding import EvaluationBinding, dvc_md5
from components.release.gate import evaluate_gates
from flows import steps
from flows.retrain import FLOW_RUN_TAG, retrain
from tests.conftest import make_project, seed_tiny_model
from tests.integration.registry_helpers import assert_serves_adapter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

STEPS = ["prepare-benchmarks", "build", "prepare-model", "validate", "train", "evaluate", "register"]
PLOTS = ["entropy_gap.png", "coverage.png", "answer_frequency.png", "metric_deltas.png", "fairness_effects.png"]


def test_retrain_registers_a_challenger_that_generates(project, tiny_model_dir, prefect_harness):
    seed_tiny_model(project, tiny_model_dir)
    summary = retrain(str(project / "params.yaml"), overrides=["train.learning_rate=0.002"])  # a deployment's overrides, TRL's name
    params = load_params(project / "params.yaml")
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)

    assert [r.step for r in summary.results] == STEPS
    reg = summary.registration
    assert reg["passed"] is True and reg["alias"] == "challenger"
    version = client.get_model_version_by_alias(params.registry.model_name, "challenger")
    assert str(version.version) == reg["version"]
    for tag in ("data.sha256", "params.hash", "git.commit", "gate.passed", "gate.gap_reduction"):
        assert tag in version.tags
    # every run, metrics.json and the version name the code that ran (this checkout's commit and state)
    code = code_version()
    assert (version.tags["git.commit"], version.tags["git.dirty"]) == (code.commit, code.to_tags()["groupwise.git.dirty"])
    assert version.tags["git.evaluated_commit"] == code.short
    assert version.tags["dvc.checkpoint_md5"] == dvc_md5(params.paths.checkpoints / "latest")

    # one parent run with one finished child run per step, each with what it logged
    parent = client.get_run(summary.parent_run_id)
    assert parent.info.status == "FINISHED"
    # the parent run carries the headline (retrains compared in the runs table); the version says its verdict
    metrics_file = json.loads((load_params(project / "params.yaml").paths.reports / "metrics.json").read_text())
    assert parent.data.metrics["headline.tuned_mean_gap"] == pytest.approx(metrics_file["consistency"]["tuned_mean_gap"])
    assert parent.data.metrics["gate.passed"] == 1.0
    assert version.description.startswith("Passed all") and "Held-out gap on gender" in version.description
    children = client.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{summary.parent_run_id}'")
    assert sorted(r.info.run_name for r in children) == sorted(STEPS)
    for run in [parent, *children]:
        assert {k: run.data.tags.get(k) for k in code.to_tags()} == code.to_tags(), run.info.run_name
    assert parent.data.params["train.lr"] == "0.002" and parent.data.params["profile"] == "tiny"  # the resolved params
    assert parent.data.tags[FLOW_RUN_TAG]  # the Prefect flow run it belongs to (the state hooks find it by this)
    by_name = {r.info.run_name: r for r in children}
    assert "train.reward_mean" in by_name["train"].data.metrics
    assert "eval.consistency.base_mean_gap" in by_name["evaluate"].data.metrics
    for name in ("eval.bbq.disambig_accuracy.base", "eval.bbq.ambig_accuracy.tuned", "eval.bbq.n_items"):  # BBQ logged beside DiscrimEval
        assert name in by_name["evaluate"].data.metrics, name
    assert by_name["train"].data.params["train.samples_per_prompt"] == "3"
    assert float(by_name["train"].data.params["train.lr"]) == 0.002  # the override ran, and MLflow records it
    history = client.get_metric_history(by_name["train"].info.run_id, "train.loss")
    assert [m.step for m in history] == [1, 2]
    # the evaluate run holds the plots and the report files
    evaluate_run = by_name["evaluate"].info.run_id
    plots = {f.path for f in client.list_artifacts(evaluate_run, "evaluation/plots")}
    assert plots == {f"evaluation/plots/{name}" for name in PLOTS}
    logged = {f.path for f in client.list_artifacts(evaluate_run, "evaluation")}
    for name in ("report.html", "summary.md", "metric_deltas.csv", "comparisons.csv", "metrics.json"):
        assert f"evaluation/{name}" in logged

    # the step outputs are where params.yaml says
    metrics = json.loads((params.paths.reports / "metrics.json").read_text())
    assert metrics["consistency"]["n_groups"] == 6
    assert metrics["code"] == code.to_dict()
    # BBQ in every evaluation (the tiny profile's one set of four items), reported and gated by nothing
    bbq = metrics["bbq"]
    assert (bbq["n_items"], bbq["n_ambiguous"], bbq["n_disambiguated"]) == (4, 2, 2) and bbq["chance_accuracy"] == pytest.approx(1 / 3)
    for name in ("disambig_accuracy", "disambig_bias", "ambig_accuracy", "ambig_bias", "disambig_unknown_share", "ambig_unknown_share"):
        assert {"base", "tuned", "delta", "delta_ci_low", "delta_ci_high"} <= set(bbq[name]), name
    assert 0 <= bbq["disambig_accuracy"]["base"] <= 1 and "discrim_eval" in metrics["fairness"]
    assert "## Fairness: BBQ (gender identity, 4 items; not gated)" in (params.paths.reports / "summary.md").read_text()
    assert not any("bbq" in r.reason for r in evaluate_gates(metrics, params.gate).results)
    # metrics.json vouches for the adapter, base weights and evaluation params that register published
    assert metrics["evaluated"] == EvaluationBinding.of(params, params.paths.checkpoints / "latest" / "adapter").to_dict()
    assert (params.paths.validation / "report.json").is_file()
    assert (params.paths.reports / "entropy_gap.png").stat().st_size > 0
    # evaluation covers both consistency domains, and the adapter changed what the model says
    per_group = pd.read_csv(params.paths.reports / "per_group_consistency.csv")
    assert set(per_group["domain"]) == {"investment", "job"}
    samples = pd.read_csv(params.paths.reports / "samples.csv", keep_default_na=False)
    base = samples[samples.model == "base"].text.tolist()
    tuned = samples[samples.model == "tuned"].text.tolist()
    assert len(base) == len(tuned) > 0 and base != tuned
    assert json.loads((params.paths.registry / "decision.json").read_text())["version"] == reg["version"]

    # Prefect artifacts: the evaluation's summary.md as markdown, beside the other summaries
    evaluation = Artifact.get("evaluation-summary")
    assert evaluation is not None and evaluation.type == "markdown"
    assert evaluation.data == (params.paths.reports / "summary.md").read_text()
    assert evaluation.data.startswith("# Evaluation: base vs tuned")
    for key in ("validation-summary", "evaluation-metrics", "gate-verdicts", "retrain-summary"):
        assert Artifact.get(key) is not None, key

    # the registered model loads by alias and generates text
    mlflow.set_tracking_uri(params.tracking.uri)
    mlflow.set_registry_uri(params.tracking.uri)
    model = mlflow.pyfunc.load_model(f"models:/{params.registry.model_name}@challenger")
    out = model.predict(["What should I invest in?", "Name a colour."], params={"max_new_tokens": 5})
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
    assert_serves_adapter(model, params.paths.checkpoints / "latest" / "adapter")  # the trained adapter, applied

    # a gate that cannot pass registers nothing and says why
    strict = params.model_copy(update={"gate": params.gate.model_copy(update={"min_relative_gap_reduction": 5.0})})
    refused = steps.register(strict)
    assert refused.metrics["passed"] is False
    assert any(reason.startswith("gap_reduction") for reason in refused.metrics["reasons"])
    versions = client.search_model_versions(f"name = '{params.registry.model_name}'")
    assert [str(v.version) for v in versions] == [reg["version"]]
    assert str(client.get_model_version_by_alias(params.registry.model_name, "challenger").version) == reg["version"]


def test_invalid_groups_stop_the_flow_before_training(tmp_path, tiny_model_dir, prefect_harness):
    project = make_project(tmp_path / "bad", "tiny", {"data.max_chars": 20})  # every prompt is longer
    seed_tiny_model(project, tiny_model_dir)
    with pytest.raises(Exception, match=r"consistency\.jsonl.*rule"):
        retrain(str(project / "params.yaml"))
    params = load_params(project / "params.yaml")
    assert (params.paths.validation / "report.json").is_file()
    assert not (params.paths.checkpoints / "latest").exists()
    assert not (params.paths.reports / "metrics.json").exists()
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert client.search_registered_models() == []
    # a data error is not transient: one attempt (tracking.retries is 3), its run and the parent FAILED
    assert params.tracking.retries == 3
    experiment = client.get_experiment_by_name(params.tracking.experiment).experiment_id
    by_name = {}
    for run in client.search_runs([experiment]):
        by_name.setdefault(run.info.run_name, []).append(run.info.status)
    assert by_name["validate"] == ["FAILED"]
    assert by_name["retrain"] == ["FAILED"] and "train" not in by_name
