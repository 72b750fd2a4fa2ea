"""Gated registration against the champion, promotion, rollback and idempotency, on real MLflow
(SQLite) through the real register step and the `groupwise` CLI."""

from __future__ import annotations

import csv
import json
import shutil

import mlflow
import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from components.config import load_params
from components.release.gate import CHAMPION_GATES, GATES
from components.tracking import runs
from components.tracking.model_registry import HISTORY_TAG, register_adapter
from flows import steps
from flows.cli import app
from tests.integration.registry_helpers import assert_serves_adapter, good_metrics, registry_project, write_adapter, write_metrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
NAME = "groupwise-smollm2-lora"


def cli(project, *args):
    result = CliRunner().invoke(app, [*args, "--params", str(project / "params.yaml")])
    return result.exit_code, result.output


def aliases(client) -> dict[str, str]:
    return {alias: str(v) for alias, v in client.get_registered_model(NAME).aliases.items()}


def test_register_promote_force_and_rollback(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("GROUPWISE_USER", "alice")
    project = registry_project(tmp_path / "p", tiny_model_dir)
    params = load_params(project / "params.yaml")
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    adapters = tmp_path / "adapters"  # a copy of each version's adapter: `latest` is overwritten

    def train(version: str, seed: int) -> None:
        shutil.copytree(write_adapter(project, seed=seed), adapters / version)

    def champion_serves(version: str):
        """@champion, loaded through the registry, applies `version`'s adapter tensor for tensor."""
        mlflow.set_tracking_uri(params.tracking.uri)
        mlflow.set_registry_uri(params.tracking.uri)
        model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
        assert_serves_adapter(model, adapters / version)
        return model

    # v1: no champion yet -> champion gates pass with a note; gate table on disk and in MLflow
    train("1", seed=1)
    write_metrics(project, good_metrics(tuned_mean_gap=0.30))
    first = steps.register(params)
    assert first.metrics["passed"] and first.metrics["version"] == "1" and first.metrics["champion"] is None
    rows = list(csv.DictReader((params.paths.registry / "gates.csv").open()))
    assert [r["gate"] for r in rows] == [*GATES, *CHAMPION_GATES]  # every gate of the one table, in its order
    assert {r["verdict"] for r in rows} == {"pass"}
    assert next(r for r in rows if r["gate"] == "champion_gap")["reason"] == "champion_gap: no champion yet (not judged)"
    assert "| champion_gap | n/a |" in (params.paths.registry / "gates.md").read_text()
    run = client.get_run(first.run_id)
    assert run.data.metrics["gate.gap_reduction.value"] == pytest.approx(0.25)
    assert run.data.metrics["gate.gap_reduction.threshold"] == 0.0
    assert run.data.tags["gate.coverage"] == "pass" and run.data.tags["gate.passed"] == "true"
    logged = {f.path for f in client.list_artifacts(first.run_id, "registry")}
    assert {"registry/gates.md", "registry/gates.csv", "registry/decision.json"} <= logged
    v1 = client.get_model_version(NAME, "1")
    for tag in ("data.sha256", "data.dvc_md5", "params.hash", "git.commit", "groupwise.fingerprint"):
        assert tag in v1.tags
    assert float(v1.tags["metric.consistency.tuned_mean_gap"]) == 0.30
    assert aliases(client) == {"challenger": "1"}

    # the same adapter and metrics again: the same version, nothing added (safe to retry)
    again = steps.register(params)
    assert again.metrics["version"] == "1" and again.metrics["reused"] is True
    assert len(client.search_model_versions(f"name = '{NAME}'")) == 1

    code, out = cli(project, "promote", "--version", "1")
    assert code == 0, out
    assert "version 1 is @champion" in out
    assert aliases(client) == {"challenger": "1", "champion": "1"}

    # v2, judged against champion v1 (0.28 vs 0.30: better) -> registered, challenger moves
    train("2", seed=2)
    write_metrics(project, good_metrics(tuned_mean_gap=0.28))
    second = steps.register(params)
    assert second.metrics["version"] == "2" and second.metrics["champion"] == "1"
    champion_gap = next(g for g in second.metrics["gates"] if g["name"] == "champion_gap")
    assert champion_gap["passed"] and champion_gap["value"] == pytest.approx(-0.02)

    # v3 would be worse than champion v1 by 0.1 nats > 0.02: refused, nothing registered
    train("3", seed=3)  # registered by hand below
    write_metrics(project, good_metrics(tuned_mean_gap=0.40, base_mean_gap=0.50))
    refused = steps.register(params)
    assert refused.metrics["passed"] is False
    assert [r.split(":")[0] for r in refused.metrics["reasons"]] == ["champion_gap"]
    assert "champion v1" in refused.metrics["reasons"][0]
    assert len(client.search_model_versions(f"name = '{NAME}'")) == 2
    assert client.get_run(refused.run_id).data.tags["gate.champion_gap"] == "fail"

    code, out = cli(project, "promote", "--version", "2", "--reason", "better gap")
    assert code == 0, out
    assert aliases(client) == {"challenger": "2", "champion": "2", "previous-champion": "1"}
    v2 = client.get_model_version(NAME, "2")
    assert v2.tags["promotion.by"] == "alice" and v2.tags["promotion.reason"] == "better gap"
    assert v2.tags["promotion.previous_champion"] == "1" and v2.tags["promotion.forced"] == "false"
    assert v2.tags["promotion.at"].endswith("+00:00")
    champion_serves("2")

    # a version whose gates failed (registered by hand) is refused unless forced with a reason
    with mlflow.start_run(experiment_id=runs.configure(params.tracking)):
        register_adapter(params.paths.checkpoints / "latest" / "adapter", params.paths.base_model, NAME,
                         "manual", {"gate.passed": "false", "gate.significance": "fail"})  # fmt: skip
    code, out = cli(project, "promote", "--version", "3")
    assert code == 2 and "registration_gates: failed (failed: significance)" in out
    code, out = cli(project, "promote", "--version", "3", "--force")
    assert code == 2 and "--force needs --reason" in out
    code, out = cli(project, "promote", "--version", "3", "--force", "--reason", "hotfix INC-42")
    assert code == 0 and "forced" in out
    v3 = client.get_model_version(NAME, "3")
    assert v3.tags["promotion.forced"] == "true" and v3.tags["promotion.reason"] == "hotfix INC-42"
    assert v3.tags["promotion.check"].startswith("fail: registration_gates")
    assert aliases(client)["champion"] == "3" and aliases(client)["previous-champion"] == "2"
    champion_serves("3")
    assert json.loads(client.get_registered_model(NAME).tags[HISTORY_TAG]) == ["1", "2", "3"]
    code, out = cli(project, "promote", "--version", "9")
    assert code == 2 and "version 9: not found" in out

    # rollback walks the history back: 3 -> 2 -> 1, then there is nothing left to roll back to
    code, out = cli(project, "rollback", "--reason", "bad answers")
    assert code == 0 and "version 2 is @champion again" in out
    assert aliases(client)["champion"] == "2" and aliases(client)["previous-champion"] == "1"
    assert client.get_model_version(NAME, "3").tags["rollback.reason"] == "bad answers"
    champion_serves("2")
    assert cli(project, "rollback")[0] == 0
    assert aliases(client)["champion"] == "1" and "previous-champion" not in aliases(client)
    code, out = cli(project, "rollback")
    assert code == 2 and "no @previous-champion to roll back to" in out

    code, out = cli(project, "versions")
    assert code == 0 and "INC-42" in out  # the forced promotion's reason is listed

    # the champion after the rollbacks is v1: it loads through the registry by alias, applies v1's
    # adapter (with effect: not the bare base model) and generates text
    model = champion_serves("1")
    out = model.predict(["What should I invest in?"], params={"max_new_tokens": 4})
    assert len(out) == 1 and isinstance(out[0], str)
