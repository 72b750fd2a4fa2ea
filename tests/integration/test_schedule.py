"""Scheduled retraining on a real Prefect server with a real MLflow server (PostgreSQL when
available): `groupwise schedule` creates a cron deployment whose scheduled runs appear, and a
triggered run of it (the whole retrain flow, tiny profile) completes and registers a model that
loads from the server's registry, and a second triggered run cancelled through Prefect's API while it
trains leaves its MLflow runs KILLED (the flow's on_cancellation hook, run by the runner). `prefect deploy` of prefect.yaml creates the team deployment,
whose process worker runs one flow run of it at a time (concurrency_limit: 1)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import mlflow
import pytest
import yaml
from mlflow import MlflowClient

from components.config import load_params
from tests.conftest import ROOT, make_project, seed_tiny_model
from tests.integration.registry_helpers import assert_serves_adapter
from tests.integration.servers import stop

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def wait_for(what: str, check, timeout: float, proc: subprocess.Popen | None = None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: process exited {proc.returncode}:\n{log.read_text()[-4000:] if log else ''}")
        time.sleep(1)
    raise AssertionError(f"{what}: not within {timeout:.0f} s:\n{log.read_text()[-4000:] if log else ''}")


def test_schedule_serves_a_cron_deployment_whose_triggered_run_completes(tmp_path, tiny_model_dir, prefect_server_url, mlflow_server_url):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelling

    from flows.retrain import FLOW_RUN_TAG

    tracking_uri, backend = mlflow_server_url
    paris = ZoneInfo("Europe/Paris")
    hour = (datetime.now(paris).hour + 12) % 24  # far from now: no scheduled run starts during the test
    project = make_project(tmp_path / "project", "tiny", {"schedule.cron": f"15 {hour} * * *", "schedule.timezone": "Europe/Paris"})
    seed_tiny_model(project, tiny_model_dir)
    env = {**os.environ, "PREFECT_API_URL": prefect_server_url, "GROUPWISE_TRACKING_URI": tracking_uri,
           "PREFECT_RUNNER_POLL_FREQUENCY": "2"}  # fmt: skip
    log = tmp_path / "schedule.log"
    with log.open("w") as fh:
        served = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "schedule", "--params", str(project / "params.yaml")],
            cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with temporary_settings({PREFECT_API_URL: prefect_server_url}), get_client(sync_client=True) as client:
            deployment = wait_for("deployment", lambda: next(iter(client.read_deployments()), None), 120, served, log)
            assert deployment.name == "groupwise-retrain"
            (schedule,) = deployment.schedules
            assert schedule.schedule.cron == f"15 {hour} * * *" and schedule.schedule.timezone == "Europe/Paris"
            assert deployment.parameters == {"params_path": str(project / "params.yaml"), "profile": None, "overrides": []}

            scheduled = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=["SCHEDULED"])))
            upcoming = wait_for(
                "scheduled runs",
                lambda: client.read_flow_runs(
                    flow_run_filter=scheduled, deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
                ),
                60, served, log,
            )  # fmt: skip
            assert {(r.expected_start_time.astimezone(paris).hour, r.expected_start_time.minute) for r in upcoming} == {(hour, 15)}

            run = run_deployment(f"retrain/{deployment.name}", timeout=600, poll_interval=2)
            assert run.state.is_completed(), f"{run.state}\n{log.read_text()[-4000:]}"

            # a run cancelled through Prefect's API while it trains: the runner stops it, the stopped flow
            # (or, where it could not, its on_cancellation hook) marks its MLflow runs KILLED, with no other command run
            stopped = run_deployment(f"retrain/{deployment.name}", timeout=0)
            tracking = MlflowClient(tracking_uri)
            experiment = tracking.get_experiment_by_name(load_params(project / "params.yaml").tracking.experiment).experiment_id

            def runs_of_stopped() -> tuple:
                (parent,) = tracking.search_runs([experiment], f"tags.`{FLOW_RUN_TAG}` = '{stopped.id}'") or (None,)
                found = [] if parent is None else tracking.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
                return parent, {r.info.run_name: r.info.status for r in found}

            wait_for("the cancelled run's training", lambda: runs_of_stopped()[1].get("train") == "RUNNING", 300, served, log)
            client.set_flow_run_state(stopped.id, Cancelling(), force=True)
            wait_for("its MLflow runs closed", lambda: runs_of_stopped()[0].info.status != "RUNNING", 120, served, log)
            parent, children = runs_of_stopped()
            assert parent.info.status == "KILLED" and children["train"] == "KILLED", (parent.info.status, children, log.read_text()[-3000:])
            assert "RUNNING" not in children.values()
            assert wait_for("cancelled", lambda: client.read_flow_run(stopped.id).state.is_cancelled(), 60, served, log)
    finally:
        if served.poll() is None:
            os.killpg(served.pid, signal.SIGINT)
            try:
                served.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(served.pid, signal.SIGKILL)
                served.wait(timeout=10)

    # the run trained, evaluated and registered on the MLflow server; the model loads from there
    params = load_params(project / "params.yaml")
    assert (params.paths.reports / "metrics.json").is_file()
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    client = mlflow.MlflowClient()
    version = client.get_model_version_by_alias(params.registry.model_name, "challenger")
    assert version.tags["gate.passed"] == "true"
    model = mlflow.pyfunc.load_model(f"models:/{params.registry.model_name}@challenger")
    out = model.predict(["Name a colour."], params={"max_new_tokens": 4})
    assert len(out) == 1 and isinstance(out[0], str), backend
    assert_serves_adapter(model, params.paths.checkpoints / "latest" / "adapter")  # the scheduled run's adapter


def test_prefect_yaml_deploys_to_a_process_work_pool(tmp_path, prefect_server_url):
    project = make_project(tmp_path / "project", "tiny")
    shutil.copy2(ROOT / "prefect.yaml", project / "prefect.yaml")
    env = {**os.environ, "PREFECT_API_URL": prefect_server_url, "GROUPWISE_PROJECT_DIR": str(project)}
    prefect = [str(ROOT / ".venv/bin/prefect")] if (ROOT / ".venv/bin/prefect").exists() else [sys.executable, "-m", "prefect"]
    for args in (["work-pool", "create", "groupwise-process", "--type", "process", "--overwrite"],
                 ["--no-prompt", "deploy", "--name", "groupwise-retrain"]):  # fmt: skip
        done = subprocess.run(
            [*prefect, *args], cwd=project, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: prefect_server_url}), get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name("retrain/groupwise-retrain")
    assert deployment.work_pool_name == "groupwise-process" and deployment.entrypoint == "flows/retrain.py:retrain"
    # one run at a time: the server holds a concurrency limit of 1 for the deployment (runs share output folders)
    limit = deployment.global_concurrency_limit
    assert deployment.concurrency_limit == 1 or (limit is not None and limit.limit == 1), (deployment.concurrency_limit, limit)
    assert deployment.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(project)}}]
    # prefect.yaml's cron mirrors params.yaml `schedule:`
    params = load_params(ROOT / "params.yaml")
    (schedule,) = deployment.schedules
    assert (schedule.schedule.cron, schedule.schedule.timezone) == (params.schedule.cron, params.schedule.timezone)
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert {d["name"] for d in spec["deployments"]} == {"groupwise-retrain", "groupwise-retrain-k8s"}


PROBE_FLOW = """
import time
from prefect import flow


@flow(name="concurrency-probe")
def retrain(params_path: str = "", profile: str | None = None, overrides: list[str] | None = None) -> None:
    time.sleep(2)  # the signature of flows.retrain.retrain, whose parameters prefect.yaml gives
"""


def test_prefect_yaml_runs_one_flow_run_of_the_deployment_at_a_time(tmp_path, prefect_server_url):
    """prefect.yaml's groupwise-retrain deployment as written (work pool, pull step, concurrency_limit)
    but with a flow that sleeps 2 s as its entrypoint, run by a real process worker: of two runs
    triggered together, the second waits (AwaitingConcurrencySlot) and starts after the first ends."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    project = tmp_path / "project"
    project.mkdir()
    (project / "probe.py").write_text(PROBE_FLOW)
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    (deployment,) = [d for d in spec["deployments"] if d["name"] == "groupwise-retrain"]
    deployment["entrypoint"] = "probe.py:retrain"
    (project / "prefect.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "PREFECT_API_URL": prefect_server_url, "GROUPWISE_PROJECT_DIR": str(project),
           "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "60"}  # fmt: skip
    pool = deployment["work_pool"]["name"]
    with temporary_settings({PREFECT_API_URL: prefect_server_url}), get_client(sync_client=True) as client:
        if pool not in {p.name for p in client.read_work_pools()}:
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    prefect = [sys.executable, "-m", "prefect"]
    done = subprocess.run([*prefect, "--no-prompt", "deploy", "--name", "groupwise-retrain"], cwd=project, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = tmp_path / "worker.log"
    with log.open("w") as fh:
        worker = subprocess.Popen([*prefect, "worker", "start", "--pool", pool], cwd=project,
                                  env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        with temporary_settings({PREFECT_API_URL: prefect_server_url}), get_client(sync_client=True) as client:
            triggered = [run_deployment("concurrency-probe/groupwise-retrain", timeout=0) for _ in range(2)]

            def finished():
                runs = [client.read_flow_run(r.id) for r in triggered]
                return runs if all(r.state.is_final() for r in runs) else None

            first, second = sorted(wait_for("both runs", finished, 240, worker, log), key=lambda r: r.start_time)
            waited = [s.name for s in client.read_flow_run_states(second.id)]
    finally:
        stop(worker)
    assert deployment["concurrency_limit"] == 1
    assert first.state.is_completed() and second.state.is_completed(), (first.state, second.state, log.read_text()[-3000:])
    assert first.end_time <= second.start_time, (first.start_time, first.end_time, second.start_time)
    assert "AwaitingConcurrencySlot" in waited, waited
