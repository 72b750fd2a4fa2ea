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
- A crashed arm is retried by Prefect and resumes from its newest state in the store
  (`flows.study_deployment`: the deployment, its automations, the wait).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from prefect import flow

from components.config import ParamsError
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
from components.study.pool_arms import collect_results, pending_arms, pull_arm, store_path, waiting_arms
from components.study.reports import report_files, write_study_report
from components.study.store import STORE_ENV, Mirror, push_results
from flows.study import restore_start_adapter, run_arm
from flows.study_deployment import (
    ARM_RETRIES,
    DEPLOYMENT,
    FLOW_NAME,
    POOL,
    StudyPoolError,
    deploy,
    require_server,
    runs_in_flight,
    submit_arm,
    wait_for_arms,
)


def _prepare_project(params, parent: str | None) -> None:
    """The study's shared steps in the worker's project, as the in-process study runs them: build,
    prepare-model and prepare-benchmarks (each reuses or atomically rewrites its outputs), then
    validation unless its report vouches for the groups. Arms side by side in one project folder take turns (a file lock)."""
    import fcntl

    from components.validation.precondition import ensure_params_validated
    from flows import steps

    lock = params.root / "data" / ".study-setup.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        for step in (steps.prepare_benchmarks, steps.build, steps.prepare_model):
            print(f"[study] {step(params, parent).summary}")
        print(f"[study] {ensure_params_validated(params)}")


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


# --- the submitting side ---------------------------------------------------------------------------


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
    url = require_server()
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
            deployment = deploy(client, pool, concurrency, study_arm)
            log(f"[study] deployment {FLOW_NAME}/{DEPLOYMENT} on work pool {pool!r} ({url}), {concurrency} arm(s) at a time")
            flow_runs = {}
            for arm in todo:
                tags = ["groupwise-study", f"study:{chosen.name}", f"arm:{arm}"]
                running = runs_in_flight(client, deployment.id, tags)
                if running:
                    flow_runs[arm] = running[0].id
                    log(f"[{chosen.folder}/{arm}] already submitted: flow run {running[0].name} ({running[0].state_name})")
                    continue
                parameters = {"arm": arm, "study_name": chosen.name, "params_path": Path(params_path).name, "parent_run_id": parent,
                              "store": str(shared) if shared else None}  # fmt: skip
                run = submit_arm(client, deployment.id, f"{chosen.folder}-{arm}", parameters, tags, submission)
                flow_runs[arm] = run.id
                log(f"[{chosen.folder}/{arm}] submitted: flow run {run.name}")
            failed = wait_for_arms(client, chosen, flow_runs, params, shared, poll, log)
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
