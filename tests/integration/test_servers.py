"""The flow's retries against a real `mlflow server` (PostgreSQL when available) that is briefly
unreachable, and task caching of the cheap deterministic steps, on a real Prefect API."""

from __future__ import annotations

import shutil
from urllib.parse import urlparse

import mlflow
import pytest
import yaml
from prefect import flow

from components.config import load_params
from components.hashing import file_sha256
from flows import caching
from flows.retrain import _run_cached, build_task
from tests.conftest import ROOT, make_project
from tests.integration.servers import DelayedProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@flow(name="build-only")
def build_only(params_path: str):
    params = load_params(params_path)
    result, cached = _run_cached(build_task, "build", params, None)
    return result.run_id, cached


def task_runs(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))


def test_build_retries_through_a_tracking_outage_then_is_cached(tmp_path, mlflow_server_url, prefect_harness, monkeypatch):
    url, backend = mlflow_server_url
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # let the outage reach Prefect's retries
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with DelayedProxy(urlparse(url).port, down_for=4.0) as proxy:
        project = make_project(
            tmp_path / "p", "tiny", {"tracking.uri": proxy.url, "tracking.retries": 6, "tracking.retry_delay_seconds": 2}
        )
        monkeypatch.setenv("GROUPWISE_TRACKING_URI", proxy.url)
        state = build_only(str(project / "params.yaml"), return_state=True)
        run_id, cached = state.result()
    assert not cached
    (build,) = [t for t in task_runs(state.state_details.flow_run_id) if t.name.startswith("build")]
    assert build.run_count >= 2, "the first attempt should have met the outage"
    assert build.state.is_completed()
    run = mlflow.MlflowClient(tracking_uri=url).get_run(run_id)  # logged on the real server, past the outage
    assert run.info.run_name == "build" and run.data.metrics["groups.consistency_train"] > 0, backend

    # unchanged inputs and outputs: served from Prefect's cache (no new MLflow run)
    monkeypatch.setenv("GROUPWISE_TRACKING_URI", url)
    params = load_params(project / "params.yaml")
    assert caching.outputs_intact("build", params)
    assert build_only(str(project / "params.yaml")) == (run_id, True)
    # outputs deleted behind the flow's back (as `dvc repro` does): rebuilt, not served from cache
    shutil.rmtree(params.paths.groups)
    assert not caching.outputs_intact("build", params)
    rebuilt_id, cached = build_only(str(project / "params.yaml"))
    assert not cached and rebuilt_id != run_id and (params.paths.groups / "consistency.jsonl").is_file()
    assert build_only(str(project / "params.yaml"))[1] is True
    # changed inputs (a params section the step reads): a new cache key, so it runs again
    raw = yaml.safe_load((project / "params.yaml").read_text())
    raw["data"]["heldout_fraction"] = 0.3
    (project / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    changed = load_params(project / "params.yaml")
    assert caching.input_key("build", changed) != caching.input_key("build", params)
    assert build_only(str(project / "params.yaml"))[1] is False

    # a user's own groups file edited in place: its content keys the step, so the edited rows are built
    own = project / "data" / "mine.jsonl"
    shutil.copy2(ROOT / "data" / "examples" / "groups.jsonl", own)
    raw["data"]["groups_file"] = "data/mine.jsonl"
    (project / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    first_id, cached = build_only(str(project / "params.yaml"))
    own.write_text("".join(own.read_text().splitlines(keepends=True)[:8]))  # 13 rows cut to 8, same path
    second_id, cached_again = build_only(str(project / "params.yaml"))
    client = mlflow.MlflowClient(tracking_uri=url)
    first, second = client.get_run(first_id).data, client.get_run(second_id).data
    assert not cached and not cached_again and second_id != first_id
    assert sum(v for k, v in first.metrics.items() if k.startswith("groups.")) == 7  # the example's 7 groups
    assert sum(v for k, v in second.metrics.items() if k.startswith("groups.")) == 4  # its first 8 rows: 4 groups
    assert second.tags["data.source_sha256"] == file_sha256(own) != first.tags["data.source_sha256"]
