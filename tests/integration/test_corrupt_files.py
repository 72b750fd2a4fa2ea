"""A truncated base model or adapter stops `train` and `evaluate` in one line, exit code 2, with
nothing lost: the checkpoint is untouched, no metrics.json is written that `register` could take,
and no MLflow run is left RUNNING (issue: integrity).

Before, a truncated base model's safetensors error came out as a traceback with exit code 1, and
one changed in place loaded without complaint: only the hashes its folder records were compared.
Real CLI, real MLflow (SQLite), the tiny model.
"""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from components.config import load_params
from flows import steps
from flows.cli import app
from tests.integration.registry_helpers import registry_project, write_adapter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture
def project(tmp_path, tiny_model_dir):
    project = registry_project(tmp_path / "p", tiny_model_dir)
    steps.build(load_params(project / "params.yaml"))
    write_adapter(project, seed=1)
    return project


def failure_line(result, command: str) -> str:
    """The one line the CLI printed for a user error (exit code 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith(f"groupwise {command} failed: ")]
    assert len(lines) == 1, result.output
    return lines[0].removeprefix(f"groupwise {command} failed: ")


def run_statuses(params) -> dict[str, str]:
    """Run name -> status of every run in the project's MLflow."""
    client = MlflowClient(tracking_uri=params.tracking.uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return {run.info.run_name: run.info.status for run in client.search_runs(experiments)}


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_a_truncated_base_model_stops_the_step_in_one_line(project, command):
    params = load_params(project / "params.yaml")
    weights = params.paths.base_model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20_000])
    adapter = params.paths.checkpoints / "latest" / "adapter" / "adapter_model.safetensors"
    trained = adapter.read_bytes()

    result = CliRunner().invoke(app, [command, "--params", str(project / "params.yaml")])
    message = failure_line(result, command)
    assert message.startswith(f"{weights}: SHA-256 "), message
    assert message.endswith(
        "recorded in groupwise_model.json (truncated or changed since it was provisioned); "
        "run `groupwise prepare-model` to rebuild it from its source"
    ), message
    assert adapter.read_bytes() == trained  # the checkpoint it would have replaced is kept
    assert not (params.paths.reports / "metrics.json").exists()
    statuses = run_statuses(params)
    assert "RUNNING" not in statuses.values(), statuses
    # train fails inside its run (marked FAILED); evaluate checks its inputs before opening one
    assert statuses.get(command) == ("FAILED" if command == "train" else None), statuses


def test_a_truncated_adapter_is_not_evaluated(project):
    params = load_params(project / "params.yaml")
    adapter = params.paths.checkpoints / "latest" / "adapter" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:20_000])

    result = CliRunner().invoke(app, ["evaluate", "--params", str(project / "params.yaml")])
    message = failure_line(result, "evaluate")
    assert message.startswith(f"{adapter}: the adapter does not load ("), message
    assert not (params.paths.reports / "metrics.json").exists()
    statuses = run_statuses(params)
    assert "RUNNING" not in statuses.values() and "evaluate" not in statuses, statuses
    # nothing for register to take
    result = CliRunner().invoke(app, ["register", "--params", str(project / "params.yaml")])
    assert failure_line(result, "register") == (
        f"{params.paths.reports / 'metrics.json'}: no evaluation metrics; run `groupwise evaluate` first"
    )
