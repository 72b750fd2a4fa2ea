"""MLflow 3 lineage against a real tracking server: a retrain's registered version leads to its
LoggedModel, and from there to its evaluation metrics, its training run and every input dataset; a
refused adapter is a LoggedModel too, tagged with its verdict and never registered."""

import json

import pytest
from mlflow import MlflowClient

from components.config import load_params, with_overrides
from components.hashing import file_sha256
from components.tracking.logged_model import ADAPTER_TAG, DIGEST_CHARS, SHA_TAG
from components.tracking.runs import metric_numbers
from flows import steps
from flows.retrain import retrain
from tests.conftest import seed_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

EVALUATION_INPUTS = {"groups/consistency.jsonl", "groups/diversity.jsonl", "validation/report.json",
                     "benchmarks/discrim_eval/explicit.jsonl", "benchmarks/bbq/Gender_identity.jsonl"}  # fmt: skip


def _model_id(version) -> str:
    return version.model_id or version.source.removeprefix("models:/")


def test_a_registered_version_reaches_its_evaluation_and_data_through_its_logged_model(
    project, tiny_model_dir, prefect_harness, mlflow_server_url, monkeypatch
):
    url, backend = mlflow_server_url
    monkeypatch.setenv("GROUPWISE_TRACKING_URI", url)
    seed_tiny_model(project, tiny_model_dir)
    summary = retrain(str(project / "params.yaml"), overrides=["train.lr=0.002"])
    params = with_overrides(load_params(project / "params.yaml"), {"train": {"lr": 0.002}})
    assert summary.registration["passed"] is True, summary.registration
    client = MlflowClient(tracking_uri=url, registry_uri=url)
    runs = {r.step: r.run_id for r in summary.results}

    # registered version -> LoggedModel: logged by the train run, tagged with the evaluated adapter and the verdict
    version = client.get_model_version_by_alias(params.registry.model_name, params.registry.alias)
    model = client.get_logged_model(_model_id(version))
    metrics_file = json.loads((params.paths.reports / "metrics.json").read_text())
    assert model.source_run_id == runs["train"] == version.run_id, backend
    assert model.tags[ADAPTER_TAG] == metrics_file["evaluated"]["adapter_sha256"]
    assert model.tags["gate.verdict"] == "passed"
    assert summary.results[4].outputs["model"] == f"models:/{model.model_id}"

    # LoggedModel -> its evaluation metrics, logged by the evaluate run on the held-out groups file
    groups = params.paths.groups / "consistency.jsonl"
    by_key = {m.key: m for m in model.metrics}
    gap = by_key["eval.consistency.tuned_mean_gap"]
    assert gap.value == pytest.approx(metrics_file["consistency"]["tuned_mean_gap"])
    assert gap.run_id == runs["evaluate"]
    assert (gap.dataset_name, gap.dataset_digest) == ("groups/consistency.jsonl", file_sha256(groups)[:DIGEST_CHARS])
    figures = set(metric_numbers(metrics_file, "eval.")) - {"eval.schema_version"}
    assert figures <= set(by_key), figures - set(by_key)  # every figure of metrics.json, fairness and BBQ too

    # the evaluate run's inputs: groups, validation report and benchmark files, with digests, linked to the model
    evaluate = client.get_run(runs["evaluate"])
    inputs = {d.dataset.name: d for d in evaluate.inputs.dataset_inputs}
    assert set(inputs) == EVALUATION_INPUTS
    for name, item in inputs.items():
        tags = {t.key: t.value for t in item.tags}
        assert tags["mlflow.data.context"] == "evaluation", name
        assert tags[SHA_TAG].startswith(item.dataset.digest) and len(tags[SHA_TAG]) == 64, name
    assert tags_of(inputs["validation/report.json"])[SHA_TAG] == file_sha256(params.paths.validation / "report.json")
    assert [m.model_id for m in evaluate.inputs.model_inputs] == [model.model_id]
    assert evaluate.data.tags["eval.model_id"] == model.model_id

    # the train run: the groups it read as training inputs, the model as its output
    train = client.get_run(runs["train"])
    trained_on = {d.dataset.name: tags_of(d)["mlflow.data.context"] for d in train.inputs.dataset_inputs}
    assert trained_on == {
        "groups/consistency.jsonl": "training",
        "groups/diversity.jsonl": "training",
        "validation/report.json": "training",
    }
    assert [m.model_id for m in train.outputs.model_outputs] == [model.model_id]

    # a refused adapter (another seed, a gate it cannot pass) is a LoggedModel with its verdict, and no version
    # (the server is shared by the session's tests: other tests' versions of the same name may be there)
    versions = lambda: sorted(v.version for v in client.search_model_versions(f"name = '{params.registry.model_name}'"))  # noqa: E731
    registered = versions()
    assert version.version in registered
    refused = with_overrides(params, {"seed": params.seed + 1, "gate": {"min_relative_gap_reduction": 5.0}})
    trained = steps.train(refused)
    steps.evaluate(refused)
    outcome = steps.register(refused)
    assert outcome.metrics["passed"] is False
    other = client.get_logged_model(trained.outputs["model"].removeprefix("models:/"))
    assert other.model_id != model.model_id and other.tags["gate.verdict"] == "refused"
    assert "gap_reduction" in other.tags["gate.reasons"]
    assert versions() == registered


def tags_of(dataset_input) -> dict[str, str]:
    return {t.key: t.value for t in dataset_input.tags}
