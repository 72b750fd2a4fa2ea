"""`configure` gets or creates the experiment race-safely: two flows starting at once against a fresh
tracking store both see no experiment, both create it, and the loser must use the winner's."""

from __future__ import annotations

import threading
import time

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from components.config import TrackingConfig
from components.tracking import runs


@pytest.fixture
def cfg(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()  # create the schema once, outside the race under test
    return TrackingConfig(uri=uri, artifact_location=tmp_path / "artifacts", experiment="groupwise")


def test_experiment_created_by_someone_else_between_lookup_and_create(cfg, monkeypatch):
    """Deterministic interleaving: our lookup sees nothing, then a second, real client creates the
    experiment before our create runs (the store raises RESOURCE_ALREADY_EXISTS)."""
    real_lookup = mlflow.get_experiment_by_name
    other = MlflowClient(cfg.uri)
    created: list[str] = []

    def lookup_then_lose_the_race(name):
        found = real_lookup(name)
        if found is None and not created:
            created.append(other.create_experiment(name, artifact_location=cfg.artifact_location.as_uri()))
        return found

    monkeypatch.setattr(mlflow, "get_experiment_by_name", lookup_then_lose_the_race)
    experiment_id = runs.configure(cfg)

    assert created and experiment_id == created[0]
    assert [e.name for e in other.search_experiments() if e.name == "groupwise"] == ["groupwise"]


def test_concurrent_configure_agrees_on_one_experiment(cfg):
    """Real concurrency: threads released together by a barrier all get the same experiment."""
    barrier = threading.Barrier(6)
    results: list[str] = []
    errors: list[BaseException] = []

    def worker():
        try:
            barrier.wait()
            results.append(runs.configure(cfg))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(barrier.parties)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    assert len(results) == barrier.parties and len(set(results)) == 1
    names = [e.name for e in MlflowClient(cfg.uri).search_experiments()]
    assert names.count("groupwise") == 1


def test_other_create_errors_are_not_swallowed(cfg):
    bad = cfg.model_copy(update={"experiment": "x" * 1000})  # over MLflow's name length limit
    with pytest.raises(MlflowException) as info:
        runs.configure(bad)
    assert info.value.error_code == "INVALID_PARAMETER_VALUE"


def test_already_exists_classification():
    from mlflow.exceptions import RestException
    from mlflow.protos.databricks_pb2 import BAD_REQUEST, RESOURCE_ALREADY_EXISTS

    assert runs._already_exists(MlflowException("Experiment(name=g) already exists.", RESOURCE_ALREADY_EXISTS))
    # what a tracking server relays to the client
    assert runs._already_exists(RestException({"error_code": "RESOURCE_ALREADY_EXISTS", "message": "exists"}))
    # a violation surfacing at commit: the store wraps the IntegrityError as BAD_REQUEST
    assert runs._already_exists(MlflowException("(psycopg2.errors.UniqueViolation) duplicate key value", BAD_REQUEST))
    assert runs._already_exists(MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: experiments.name", BAD_REQUEST))
    assert not runs._already_exists(MlflowException("database is locked", "TEMPORARILY_UNAVAILABLE"))
    assert not runs._already_exists(ValueError("already exists"))


def test_a_first_use_lock_held_too_long_is_a_user_error_that_a_flow_still_retries(tmp_path):
    from filelock import FileLock, Timeout

    from components.contracts.errors import UserError

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with FileLock(str(tmp_path / "mlflow.db.init.lock")):  # another process is migrating the new store
        with pytest.raises(runs.TrackingLockError, match=r"mlflow\.db: first use is held by another process") as held:
            with runs._first_use_lock(uri, timeout=0.1):
                pass
    assert isinstance(held.value, UserError) and isinstance(held.value.__cause__, Timeout)
    assert runs.is_transient(held.value)  # the Timeout cause: a flow's task retries it
    with runs._first_use_lock(uri, timeout=0.1):  # free again: taken and released
        pass


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens on it once closed


def test_the_wait_for_a_tracking_server_is_bounded_by_the_configured_seconds(tmp_path, monkeypatch):
    """MLflow's default schedule (7 retries, backoff 2) waits minutes; tracking.connect_timeout_seconds bounds it."""
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", raising=False)
    assert sum(runs.server_waits()) > 60
    assert runs.within([0.0, 2.0, 4.0, 8.0], 3.0) == [0.0, 2.0, 1.0] and runs.within([1.0], 5.0) == [1.0]
    uri = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(runs.TrackingUnavailableError, match=r"over 2 s\): start it"):
        runs.configure(TrackingConfig(uri=uri, artifact_location=tmp_path / "a", connect_timeout_seconds=2))
    assert time.monotonic() - started < 10


def test_an_unreachable_tracking_server_is_waited_for_aloud_then_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """It retried silently for ~4 min inside MLflow, then exited 1 with a traceback. The waits follow
    MLflow's retry settings; each is announced; the end is one line naming the URI, exit code 2."""
    from typer.testing import CliRunner

    from flows.cli import app
    from tests.conftest import make_project

    uri = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    assert runs.server_waits() == [0.0, 0.0]
    with pytest.raises(runs.TrackingUnavailableError) as info:
        runs.configure(TrackingConfig(uri=uri, artifact_location=tmp_path / "a"))
    message = str(info.value)
    assert message.startswith(f"tracking server {uri} does not accept connections (Connection refused; 3 attempts")
    assert "\n" not in message and runs.is_transient(info.value)  # a flow's task retries still apply
    waits = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[tracking] waiting")]
    expected = [f"[tracking] waiting for the tracking server at {uri} (Connection refused): attempt {n} of 3 in 0 s" for n in (2, 3)]
    assert waits == [expected[0] + " (0 s in all; tracking.connect_timeout_seconds bounds it)", expected[1]]

    project = make_project(tmp_path / "p", "tiny")
    monkeypatch.setenv("GROUPWISE_TRACKING_URI", uri)
    result = CliRunner().invoke(app, ["validate", "--params", str(project / "params.yaml")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"groupwise validate failed: tracking server {uri} does not accept connections" in " ".join(result.output.split())
    runs.wait_for_server("sqlite:///anything.db", waits=[])  # a local store: nothing to wait for
