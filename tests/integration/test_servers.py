"""The flow's retries against a real `mlflow server` (PostgreSQL when available) that is briefly
unreachable, on a real Prefect API."""

from __future__ import annotations

from urllib.parse import urlparse

import mlflow
import pytest
from prefect import flow

from components.config import load_params
from flows.retrain import _run
from tests.conftest import make_project
from tests.integration.servers import DelayedProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@flow(name="build-only")
def build_only(params_path: str):
    return _run("build", load_params(params_path), None).run_id


def task_runs(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


def test_build_retries_through_a_tracking_outage(tmp_path, mlflow_server_url, prefect_harness, monkeypatch):
    url, backend = mlflow_server_url
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # let the outage reach Prefect's retries
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with DelayedProxy(urlparse(url).port, down_for=4.0) as proxy:
        project = make_project(
            tmp_path / "p", "tiny", {"tracking.uri": proxy.url, "tracking.retries": 6, "tracking.retry_delay_seconds": 2}
        )
        monkeypatch.setenv("GROUPWISE_TRACKING_URI", proxy.url)
        state = build_only(str(project / "params.yaml"), return_state=True)
        run_id = state.result()
    (build,) = [t for t in task_runs(state.state_details.flow_run_id) if t.name.startswith("build")]
    assert build.run_count >= 2, "the first attempt should have met the outage"
    assert build.state.is_completed()
    run = mlflow.MlflowClient(tracking_uri=url).get_run(run_id)  # logged on the real server, past the outage
    assert run.info.run_name == "build" and run.data.metrics["groups.consistency_train"] > 0, backend
