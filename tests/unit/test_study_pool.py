"""`groupwise study --submit` without a server: the job templates in infra/, the automations that
retry a crashed arm, the arm flow's parameters, the settings' checks, the command's options."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT

TEMPLATES = {"docker": ROOT / "infra/study-docker-job-template.json", "kubernetes": ROOT / "infra/study-k8s-job-template.json"}


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_job_templates_fill_every_placeholder_and_mount_the_study_store(kind):
    template = json.loads(TEMPLATES[kind].read_text())
    properties = template["variables"]["properties"]
    used = set(re.findall(r"{{\s*([\w]+)\s*}}", json.dumps(template["job_configuration"])))
    assert used <= set(properties), used - set(properties)  # every placeholder is a variable of the pool
    env = properties["env"]["default"]
    assert env["GROUPWISE_PROJECT_DIR"] == "/opt/groupwise"  # infra/worker.Dockerfile's project
    assert env["GROUPWISE_STUDY_STORE"].startswith("/shared/")
    if kind == "kubernetes":
        job = template["job_configuration"]["job_manifest"]["spec"]
        assert job["backoffLimit"] == 0 and job["template"]["spec"]["restartPolicy"] == "Never"  # Prefect retries, not the Job
        (container,) = job["template"]["spec"]["containers"]
        assert container["volumeMounts"] == [{"name": "study-store", "mountPath": "/shared"}]
        assert "GROUPWISE_TRACKING_URI" not in env  # from the Secret, never from a file in git
    else:
        assert properties["volumes"]["default"] == ["groupwise-study-store:/shared"]


def test_the_automations_crash_a_silent_run_and_schedule_a_crashed_one_of_the_deployment_only():
    from flows.study_pool import CRASHED_AUTOMATION, SILENT_AUTOMATION, _automations

    deployment = uuid.uuid4()
    silent, crashed = _automations(deployment, 40)
    assert (silent.name, crashed.name) == (SILENT_AUTOMATION, CRASHED_AUTOMATION)
    for automation in (silent, crashed):
        related = automation.trigger.match_related
        assert related["prefect.resource.id"] in (f"prefect.deployment.{deployment}", [f"prefect.deployment.{deployment}"])
    assert silent.trigger.posture == "Proactive" and silent.trigger.within.total_seconds() == 40
    assert "prefect.flow-run.Completed" in silent.trigger.expect  # a finished run is not silent
    assert silent.actions[0].state == "CRASHED"
    assert crashed.trigger.posture == "Reactive" and crashed.trigger.expect == {"prefect.flow-run.Crashed"}
    assert (crashed.actions[0].state, crashed.actions[0].name) == ("SCHEDULED", "AwaitingRetry")


def test_silent_after_must_leave_room_for_a_heartbeat(monkeypatch):
    from components.config import ParamsError
    from flows.study_pool import SILENT_ENV, silent_after

    monkeypatch.delenv(SILENT_ENV, raising=False)
    assert silent_after() == 90
    monkeypatch.setenv(SILENT_ENV, "40")
    assert silent_after() == 40
    for bad in ("39", "soon"):
        monkeypatch.setenv(SILENT_ENV, bad)
        with pytest.raises(ParamsError, match=SILENT_ENV):
            silent_after()


def test_the_arm_flow_takes_study_arm_params_file_parent_run_and_store():
    from prefect.utilities.callables import parameter_schema

    from flows.study_pool import ARM_RETRIES, study_arm

    schema = parameter_schema(study_arm).model_dump_for_openapi()
    assert list(schema["properties"]) == ["arm", "study_name", "params_path", "parent_run_id", "store"]
    assert schema["required"] == ["arm"] and study_arm.retries == ARM_RETRIES


def test_torchrun_processes_must_be_a_whole_number(monkeypatch, tmp_path):
    from components.config import ParamsError
    from flows.study import NPROC_ENV, train_arm

    monkeypatch.setenv(NPROC_ENV, "two")
    with pytest.raises(ParamsError, match=NPROC_ENV):
        train_arm(None, None, "arm", "", False)


def test_submit_needs_a_prefect_server(tmp_path, monkeypatch):
    from flows.cli import app
    from tests.conftest import make_project

    project = make_project(tmp_path / "p", "tiny", {"study": {"profile": "tiny", "arms": {"a": {"description": "a"}}}})
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    result = CliRunner().invoke(app, ["study", "--submit", "--params", str(project / "params.yaml")])
    assert result.exit_code == 2, result.output
    assert "PREFECT_API_URL" in result.output
    help_text = CliRunner().invoke(app, ["study", "--help"], terminal_width=200).output
    assert all(option in help_text for option in ("--submit", "--work-pool", "--concurrency", "--store"))
