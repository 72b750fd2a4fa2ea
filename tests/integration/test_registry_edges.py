"""Registry edge cases on real MLflow (SQLite): an older adapter registered again, promoting the
champion itself, the champion history limit, and a registry lock held too long."""

from __future__ import annotations

import json
import re

import pytest
from filelock import FileLock
from mlflow import MlflowClient
from typer.testing import CliRunner

from components.config import load_params
from components.tracking import model_registry
from flows import steps
from flows.cli import app
from tests.integration.registry_helpers import good_metrics, registry_project, write_adapter, write_metrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
NAME = "groupwise-smollm2-lora"


def cli(project, *args):
    result = CliRunner().invoke(app, [*args, "--params", str(project / "params.yaml")])
    return result.exit_code, " ".join(result.output.split())


def register(project, seed: int, gap: float):
    write_adapter(project, seed=seed)
    write_metrics(project, good_metrics(tuned_mean_gap=gap))
    return steps.register(load_params(project / "params.yaml")).metrics


@pytest.fixture
def project(tmp_path, tiny_model_dir):
    return registry_project(tmp_path / "p", tiny_model_dir)


def test_an_older_adapter_again_is_its_old_version_and_challenger_stays_on_the_newer(project):
    assert register(project, seed=1, gap=0.30)["version"] == "1"
    assert register(project, seed=2, gap=0.29)["version"] == "2"
    again = register(project, seed=1, gap=0.30)  # the same adapter and evaluation as version 1
    assert (again["version"], again["reused"], again["alias_moved"]) == ("1", True, False)
    params = load_params(project / "params.yaml")
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert str(client.get_model_version_by_alias(NAME, "challenger").version) == "2"
    assert len(client.search_model_versions(f"name = '{NAME}'")) == 2


def test_promoting_the_champion_itself_is_refused_and_the_history_is_capped(project, monkeypatch):
    monkeypatch.setattr(model_registry, "HISTORY_LIMIT", 2)
    for seed, gap in ((1, 0.30), (2, 0.29), (3, 0.28)):
        register(project, seed=seed, gap=gap)
    for version in ("1", "2", "3"):
        code, out = cli(project, "promote", "--version", version)
        assert code == 0, out
    code, out = cli(project, "promote", "--version", "3")
    assert code == 2 and "version 3 is already @champion" in out
    params = load_params(project / "params.yaml")
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert json.loads(client.get_registered_model(NAME).tags[model_registry.HISTORY_TAG]) == ["2", "3"]
    aliases = {a: str(v) for a, v in client.get_registered_model(NAME).aliases.items()}
    assert aliases == {"challenger": "3", "champion": "3", "previous-champion": "2"}
    # `groupwise versions` shows them (search_model_versions alone returns no aliases)
    assert {v.version: v.aliases for v in model_registry.list_versions(NAME)} == {
        "1": (), "2": ("previous-champion",), "3": ("challenger", "champion"),
    }  # fmt: skip
    result = CliRunner().invoke(app, ["versions", "--params", str(project / "params.yaml")])
    assert result.exit_code == 0 and "previous-champ" in result.output and "champion" in result.output, result.output


def test_a_registry_lock_held_too_long_fails_in_one_line_and_registers_nothing(project):
    data = re.sub(r"lock_timeout_seconds: [\d.]+", "lock_timeout_seconds: 0.5", (project / "params.yaml").read_text())
    (project / "params.yaml").write_text(data)
    params = load_params(project / "params.yaml")
    assert params.registry.lock_timeout_seconds == 0.5
    write_adapter(project, seed=1)
    write_metrics(project, good_metrics())
    lock = model_registry.lock_path(params.tracking.uri, NAME)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):  # another process in the middle of a registration
        code, out = cli(project, "register")
    assert code == 2 and "could not be acquired" in out and "Traceback" not in out
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert client.search_model_versions(f"name = '{NAME}'") == []
