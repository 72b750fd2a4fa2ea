"""The Prefect side of `groupwise study --submit`: the arm deployment on its work pool, the automations
that reschedule an arm whose worker died, one flow run per arm (idempotent), and the wait for them.

A crashed arm is retried by Prefect: an exception, by the flow's retries (`ARM_RETRIES`); a run
whose process died (reported Crashed by its worker) or whose worker died with it (its heartbeats,
every `HEARTBEAT_SECONDS`, stop: the automation `SILENT_AUTOMATION` marks it Crashed after
`silent_after()` s) is rescheduled by the automation `CRASHED_AUTOMATION`, and any worker picks it
up; the arm then resumes from its newest state in the store. An arm gives up after 1 + `ARM_RETRIES`
attempts in all.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from components.config import ParamsError
from components.contracts.errors import UserError
from components.study.domain import Study
from components.study.pool_arms import collect_results
from components.study.reports import write_study_report

DEPLOYMENT = "groupwise-study-arm"
FLOW_NAME = "study-arm"
POOL = "groupwise-study"
ARM_RETRIES = 2
HEARTBEAT_SECONDS = 30  # Prefect's minimum
SILENT_AFTER_SECONDS = 90  # no heartbeat for this long: the run's worker is gone
SILENT_ENV = "GROUPWISE_STUDY_SILENT_AFTER_SECONDS"  # another wait (at least HEARTBEAT_SECONDS + 10)
SILENT_AUTOMATION = f"{DEPLOYMENT}: a run without heartbeats has crashed"
CRASHED_AUTOMATION = f"{DEPLOYMENT}: reschedule a crashed run"
PROJECT_DIR_ENV = "GROUPWISE_PROJECT_DIR"
FINAL_EVENTS = ("Completed", "Failed", "Cancelled", "Crashed")
RESCHEDULE_GRACE_SECONDS = 120  # a Crashed arm not scheduled again within this long counts as failed


class StudyPoolError(UserError, RuntimeError):
    """The work pool cannot run the study (no Prefect server, a failed arm, results not reachable)."""


def require_server() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        raise StudyPoolError("study --submit needs a Prefect server that the workers reach too: set PREFECT_API_URL (docs/operations.md)")
    return url


def silent_after() -> int:
    """Seconds without a heartbeat after which an arm's run counts as dead: $GROUPWISE_STUDY_SILENT_AFTER_SECONDS or 90."""
    raw = os.environ.get(SILENT_ENV) or str(SILENT_AFTER_SECONDS)
    if not raw.isdigit() or int(raw) < HEARTBEAT_SECONDS + 10:
        raise ParamsError(f"{SILENT_ENV}={raw!r}: seconds, at least {HEARTBEAT_SECONDS + 10} (heartbeats come every {HEARTBEAT_SECONDS} s)")
    return int(raw)


def automations(deployment_id, silent: int) -> list:
    """A run of the deployment silent for `silent` s is Crashed; a Crashed run is scheduled again."""
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    ours = {"match": {"prefect.resource.id": "prefect.flow-run.*"},
            "match_related": {"prefect.resource.role": "deployment", "prefect.resource.id": f"prefect.deployment.{deployment_id}"}}  # fmt: skip
    silent_run = AutomationCore(
        name=SILENT_AUTOMATION,
        description="An arm whose heartbeats stopped (its worker died with it) has crashed.",
        trigger=EventTrigger(
            **ours,
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{s}" for s in FINAL_EVENTS)},
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=silent,
        ),
        actions=[ChangeFlowRunState(state=StateType.CRASHED, message=f"no heartbeat for {silent} s: its worker is gone")],
    )
    crashed_run = AutomationCore(
        name=CRASHED_AUTOMATION,
        description="A crashed arm is scheduled again: a worker picks it up and it resumes from the study store.",
        trigger=EventTrigger(**ours, expect={"prefect.flow-run.Crashed"}, posture=Posture.Reactive, threshold=1, within=0),
        actions=[ChangeFlowRunState(state=StateType.SCHEDULED, name="AwaitingRetry", message="crashed: scheduled again")],
    )
    return [silent_run, crashed_run]


def deploy(client, pool: str, concurrency: int, arm_flow) -> object:
    """The work pool (a process pool when it does not exist yet) capped at `concurrency` runs, the
    arm deployment of `arm_flow` on it and the automation that retries a run whose worker died. Returns the deployment."""
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound
    from prefect.utilities.callables import parameter_schema

    try:
        client.read_work_pool(pool)
    except ObjectNotFound:
        client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    client.update_work_pool(pool, WorkPoolUpdate(concurrency_limit=concurrency))
    flow_id = client.create_flow_from_name(FLOW_NAME)
    deployment_id = client.create_deployment(
        flow_id,
        DEPLOYMENT,
        entrypoint="flows/study_pool.py:study_arm",
        work_pool_name=pool,
        description="one arm of a groupwise study (groupwise study --submit)",
        tags=["groupwise", "study"],
        pull_steps=[{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $" + PROJECT_DIR_ENV + " }}"}}],
        parameter_openapi_schema=parameter_schema(arm_flow).model_dump_for_openapi(),
        job_variables={"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_SECONDS)}},
    )
    for automation in automations(deployment_id, silent_after()):
        for old in client.read_automations_by_name(automation.name):
            client.delete_automation(old.id)
        client.create_automation(automation)
    return client.read_deployment(deployment_id)


def runs_in_flight(client, deployment_id, tags: list[str]):
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )

    live = FlowRunFilterStateType(any_=["SCHEDULED", "PENDING", "RUNNING", "PAUSED", "CANCELLING"])
    return client.read_flow_runs(
        flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=tags), state=FlowRunFilterState(type=live)),
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
    )


def submit_arm(client, deployment_id, name: str, parameters: dict, tags: list[str], submission: str):
    """One flow run of the arm deployment, created at most once per `submission`: Prefect's client
    sends a POST again after a read timeout or a 503 (a busy server may have created the run
    already), so the request carries an idempotency key, `<submission>:<name>`, and the server
    answers a repeat with the run it created."""
    return client.create_flow_run_from_deployment(
        deployment_id, parameters=parameters, tags=tags, name=name, idempotency_key=f"{submission}:{name}"
    )


def wait_for_arms(client, study: Study, flow_runs: dict, params, store: Path | None, poll: float, log) -> dict[str, str]:
    """Poll the arms' flow runs until all are final, a line per state change; the report is rewritten
    as each arm completes. Returns {arm: state message} of those that did not complete."""
    seen: dict[str, str] = {}
    failed: dict[str, str] = {}
    crashed: dict[str, float] = {}
    left = dict(flow_runs)
    started = time.monotonic()
    while left:
        for arm, run_id in list(left.items()):
            run = client.read_flow_run(run_id)
            label = f"{run.state_name}" + (f" (run {run.run_count})" if run.run_count > 1 else "")
            if seen.get(arm) != label:
                seen[arm] = label
                log(
                    f"[{study.folder}/{arm}] {label} at {time.monotonic() - started:.0f} s"
                    + (f": {run.state.message}" if run.state and run.state.message and not run.state.is_running() else "")
                )
            if run.state is not None and run.state.is_crashed() and run.run_count <= ARM_RETRIES:
                crashed.setdefault(arm, time.monotonic())
                if time.monotonic() - crashed[arm] < RESCHEDULE_GRACE_SECONDS:
                    continue  # the automation schedules it again
            crashed.pop(arm, None)
            if run.state is not None and run.state.is_final():
                del left[arm]
                if run.state.is_completed():
                    collect_results(params, study, store)
                    write_study_report(study)
                else:
                    failed[arm] = f"{run.state_name}: {run.state.message or ''}".strip()
        if left:
            time.sleep(poll)
    return failed
