"""`groupwise study --submit`: a study's arms as flow runs of one deployment on a Prefect work pool.

- The deployment `study-arm/groupwise-study-arm` runs `study_arm(study, arm, params path)`: one arm
  through the same `flows.study.run_arm` the in-process study uses, in the project folder of the
  worker (`$GROUPWISE_PROJECT_DIR`, resolved on the worker). `submit_study` creates or updates it,
  sets the work pool's concurrency limit (arms at once), submits a flow run per unfinished arm
  (a finished arm is skipped, an arm already queued or running is waited on, not submitted twice;
  a request the client sends again after a lost answer creates no second run: `submit_arm`),
  prints a line whenever an arm changes state, and writes the study's report as arms finish.
- Shared state: every worker tracks to the same MLflow server (the arms are child runs of the
  submitter's `study` run), and with a study store (`--store` or `$GROUPWISE_STUDY_STORE`, a folder
  on a shared filesystem: `components.study.store`) each arm copies its checkpoints there while it
  trains and its results when done. Without a store the workers must share the submitter's project
  folder (one host).
- A crashed arm is retried by Prefect: an exception, by the flow's retries (`ARM_RETRIES`); a run
  whose process died (reported Crashed by its worker) or whose worker died with it (its heartbeats,
  every `HEARTBEAT_SECONDS`, stop: the automation `SILENT_AUTOMATION` marks it Crashed after
  `silent_after()` s) is rescheduled by the automation `CRASHED_AUTOMATION`, and any worker picks
  it up; the arm then resumes from its newest state in the store. An arm gives up after
  1 + `ARM_RETRIES` attempts in all.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from prefect import flow

from components.config import ParamsError
from components.contracts.errors import UserError
from components.study.domain import (
    Study,
    arm_done,
    arm_fingerprint,
    arm_params,
    built_groups_sha256,
    curve_pending,
    load_study,
    pick_arms,
    study_params,
    trained,
)
from components.study.reports import report_files, write_study_report
from components.study.store import STORE_ENV, ArmStore, Mirror, pull_checkpoints, pull_results, push_results
from flows.study import restore_start_adapter, run_arm

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


def store_path(store: str | Path | None) -> Path | None:
    """The study store: `store`, else $GROUPWISE_STUDY_STORE, else none."""
    value = store or os.environ.get(STORE_ENV)
    return Path(value) if value else None


def _prepare_project(params, parent: str | None) -> None:
    """The study's shared steps in the worker's project, as the in-process study runs them: build,
    prepare-model and prepare-benchmarks (each reuses or atomically rewrites its outputs), then
    validation unless its report vouches for the groups. Arms side by side in one project folder take turns (a file lock)."""
    import fcntl

    from components.validation.precondition import ensure_validated
    from flows import steps

    lock = params.root / "data" / ".study-setup.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        for step in (steps.prepare_benchmarks, steps.build, steps.prepare_model):
            print(f"[study] {step(params, parent).summary}")
        print(
            f"[study] {ensure_validated(params.paths.groups, params.data, params.paths.validation / 'report.json', params.paths.base_model)}"
        )


@flow(name=FLOW_NAME, log_prints=True, retries=ARM_RETRIES, retry_delay_seconds=5)
def study_arm(
    arm: str, study_name: str | None = None, params_path: str = "params.yaml", parent_run_id: str | None = None, store: str | None = None
) -> dict:
    """One arm of a study on a worker: train (resuming from the store's newest state) and evaluate."""
    from prefect.runtime import flow_run

    attempt = flow_run.run_count or 1
    if attempt > 1 + ARM_RETRIES:
        raise StudyPoolError(f"study arm {arm!r}: attempt {attempt}, after {ARM_RETRIES} retries: not tried again")
    params, chosen = load_study(params_path, study_name)
    if arm not in chosen.config.arms:
        raise ParamsError(f"study: unknown arm {arm!r}; arms of study {chosen.name!r}: {sorted(chosen.config.arms)}")
    _prepare_project(study_params(params, chosen), parent_run_id)
    arm_p = arm_params(params, chosen, arm)
    fingerprint = arm_fingerprint(arm_p, chosen.config.arms[arm].kind)
    shared = store_path(store)
    box = pull_arm(shared, chosen, arm, arm_p, fingerprint) if shared else None
    if arm_done(chosen, arm, fingerprint, built_groups_sha256(arm_p)) and not curve_pending(arm_p, chosen, arm):
        print(f"[{chosen.folder}/{arm}] done earlier: skipped")
        return {"name": arm, "skipped": True}
    start_adapter_here(params, chosen, arm, parent_run_id, shared)
    if box is None:
        record = run_arm(arm_p, chosen, arm, parent_run_id)
    else:
        with Mirror(arm_p.paths.checkpoints, box.checkpoints(fingerprint), lambda: trained(arm_p)):
            record = run_arm(arm_p, chosen, arm, parent_run_id)
        push_results(chosen.arm_dir(arm), box)
    return {"name": arm, "skipped": False, "mlflow_run_id": record.get("mlflow_run_id")}


def start_adapter_here(params, study: Study, arm: str, parent: str | None, store: Path | None) -> None:
    """The adapter an arm starts from (`start_from`) on this worker: the start arm's final checkpoint
    and results from the store (another worker trained it), else that arm trained again here when it
    is finished but its adapter is not on this disk (`flows.study.restore_start_adapter`)."""
    start = study.config.arms[arm].start_from
    if start is None:
        return
    if store is not None:
        start_p = arm_params(params, study, start)
        pull_arm(store, study, start, start_p, arm_fingerprint(start_p, study.config.arms[start].kind))
    restore_start_adapter(params, study, arm, parent)


def pull_arm(store: Path, study: Study, name: str, arm_p, fingerprint: str) -> ArmStore:
    """Copy from the store an arm's results (when they are for `fingerprint`) and the checkpoint
    folders this worker lacks; returns the arm's folder in the store."""
    box = ArmStore.of(store, study.folder, name)
    pull_results(box, study.arm_dir(name), fingerprint)
    for rel in pull_checkpoints(box.checkpoints(fingerprint), arm_p.paths.checkpoints):
        print(f"[{study.folder}/{name}] from the store: {rel}")
    return box


# --- the submitting side ---------------------------------------------------------------------------


def pending_arms(params, study: Study, arms: list[str]) -> list[str]:
    """The arms that are not finished for their current params (or whose learning curve is not). By
    params alone: the submitter builds no groups; each worker builds them and checks them itself."""
    todo = []
    for name in arms:
        arm = arm_params(params, study, name)
        if not arm_done(study, name, arm_fingerprint(arm, study.config.arms[name].kind)) or curve_pending(arm, study, name):
            todo.append(name)
    return todo


def waiting_arms(study: Study, todo: list[str]) -> dict[str, str]:
    """{arm: the unfinished arm it starts from} for the arms of `todo` that must wait (`start_from`):
    they are submitted by a later `--submit`, once the adapter they start from exists."""
    return {a: study.config.arms[a].start_from for a in todo if study.config.arms[a].start_from in todo}


def collect_results(params, study: Study, store: Path | None) -> list[str]:
    """Copy into results/ the store's results of the study's arms (those for their current params)."""
    if store is None:
        return []
    got = []
    for name in study.config.arms:
        arm = arm_params(params, study, name)
        if pull_results(ArmStore.of(store, study.folder, name), study.arm_dir(name), arm_fingerprint(arm, study.config.arms[name].kind)):
            got.append(name)
    return got


def _require_server() -> str:
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


def _automations(deployment_id, silent: int) -> list:
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


def deploy(client, pool: str, concurrency: int) -> object:
    """The work pool (a process pool when it does not exist yet) capped at `concurrency` runs, the
    arm deployment on it and the automation that retries a run whose worker died. Returns the deployment."""
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
        parameter_openapi_schema=parameter_schema(study_arm).model_dump_for_openapi(),
        job_variables={"env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_SECONDS)}},
    )
    for automation in _automations(deployment_id, silent_after()):
        for old in client.read_automations_by_name(automation.name):
            client.delete_automation(old.id)
        client.create_automation(automation)
    return client.read_deployment(deployment_id)


def _runs_in_flight(client, deployment_id, tags: list[str]):
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


def submit_study(
    params_path: str | Path,
    name: str | None = None,
    arms: list[str] | None = None,
    pool: str = POOL,
    concurrency: int = 2,
    store: str | Path | None = None,
    poll: float = 5.0,
    log: Callable[[str], None] = print,
) -> Path:
    """Run the study's unfinished arms as flow runs on `pool`, at most `concurrency` at once; wait,
    then write the report. Raises StudyPoolError naming the arms that failed (after the report)."""
    from prefect.client.orchestration import get_client

    from components.tracking import runs

    if concurrency < 1:
        raise ParamsError(f"study --concurrency: {concurrency} (at least 1 arm at a time)")
    params, chosen = load_study(params_path, name)
    picked = pick_arms(chosen, arms)
    shared = store_path(store)
    url = _require_server()
    collect_results(params, chosen, shared)
    todo = pending_arms(params, chosen, picked)
    for arm in picked:
        if arm not in todo:
            log(f"[{chosen.folder}/{arm}] done earlier ({chosen.arm_dir(arm) / 'arm.json'} matches its params): skipped")
    for arm, source in waiting_arms(chosen, todo).items():
        log(f"[{chosen.folder}/{arm}] waits for {source} (it starts from that arm's adapter): submit again once {source} has finished")
        todo.remove(arm)
    parent = runs.start_parent_run(params.tracking, "study", {"groupwise.profile": params.profile, "groupwise.study": chosen.name,
                                                             "groupwise.work_pool": pool})  # fmt: skip
    failed: dict[str, str] = {}
    submission = uuid.uuid4().hex
    try:
        with get_client(sync_client=True) as client:
            deployment = deploy(client, pool, concurrency)
            log(f"[study] deployment {FLOW_NAME}/{DEPLOYMENT} on work pool {pool!r} ({url}), {concurrency} arm(s) at a time")
            flow_runs = {}
            for arm in todo:
                tags = ["groupwise-study", f"study:{chosen.name}", f"arm:{arm}"]
                running = _runs_in_flight(client, deployment.id, tags)
                if running:
                    flow_runs[arm] = running[0].id
                    log(f"[{chosen.folder}/{arm}] already submitted: flow run {running[0].name} ({running[0].state_name})")
                    continue
                parameters = {"arm": arm, "study_name": chosen.name, "params_path": Path(params_path).name, "parent_run_id": parent,
                              "store": str(shared) if shared else None}  # fmt: skip
                run = submit_arm(client, deployment.id, f"{chosen.folder}-{arm}", parameters, tags, submission)
                flow_runs[arm] = run.id
                log(f"[{chosen.folder}/{arm}] submitted: flow run {run.name}")
            failed = _wait(client, chosen, flow_runs, params, shared, poll, log)
        path = write_study_report(chosen)
        runs.log_files_to(parent, report_files(chosen), "study")
        runs.end_parent_run(parent, "FAILED" if failed else "FINISHED")
    except BaseException as exc:
        runs.end_parent_run(parent, runs.stopped_status(exc))
        raise
    missing = [a for a in picked if a not in failed and a in pending_arms(params, chosen, [a])]
    if missing:
        where = (f"the store {shared} holds no results of theirs for their current params" if shared else
                 f"give the workers and this command a shared --store (or ${STORE_ENV}), or run the workers in this project folder")  # fmt: skip
        raise StudyPoolError(f"study --submit: arm(s) {missing} finished on workers whose results this project cannot see: {where}")
    if failed:
        raise StudyPoolError(
            "study --submit: arm(s) did not finish: "
            + "; ".join(f"{a}: {m}" for a, m in failed.items())
            + f" (report from the others: {path})"
        )
    log(f"[study] {path}")
    return path


def submit_arm(client, deployment_id, name: str, parameters: dict, tags: list[str], submission: str):
    """One flow run of the arm deployment, created at most once per `submission`: Prefect's client
    sends a POST again after a read timeout or a 503 (a busy server may have created the run
    already), so the request carries an idempotency key, `<submission>:<name>`, and the server
    answers a repeat with the run it created."""
    return client.create_flow_run_from_deployment(
        deployment_id, parameters=parameters, tags=tags, name=name, idempotency_key=f"{submission}:{name}"
    )


def _wait(client, study: Study, flow_runs: dict, params, store: Path | None, poll: float, log) -> dict[str, str]:
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
