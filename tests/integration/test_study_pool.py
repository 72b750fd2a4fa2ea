"""`groupwise study --submit` on a real `prefect server` with two process workers and a real MLflow
server: two tiny arms run at the same time on the two workers (each in its own project folder, as
on two machines; they share only the servers and the study store), the worker running the longer
arm is killed mid-training, Prefect retries the arm (one automation marks a run whose heartbeats
stopped Crashed, another schedules a Crashed run again) and the other worker finishes it from the
state saved in the store; the merged report (and the retried arm's adapter and training log) equal
those of the same arms run serially."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import httpx
import pandas as pd
import pytest

from components.code_version import code_version
from tests.conftest import ROOT, make_project, seed_tiny_model
from tests.integration.servers import stop

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

POOL = "groupwise-study-test"
# both arms keep a resumable state after every step; "long" trains long enough to be killed mid-way
ARMS = {
    "short": {"description": "two steps", "overrides": {"train": {"save_every": 1}}},
    "long": {"description": "eight steps", "overrides": {"train": {"steps": 8, "save_every": 1, "lr": 5.0e-4}}},
}
STUDY = {"study": {"profile": "tiny-study", "arms": ARMS}}


def _project(path, tiny_model_dir, tiny_profile):
    project = make_project(path, "tiny", {**STUDY, "profiles.tiny-study": tiny_profile})
    seed_tiny_model(project, tiny_model_dir)
    return project


def _wait(what, check, timeout, procs=(), logs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(
                    f"{what}: a process exited ({proc.returncode}):\n" + "\n".join(log.read_text()[-3000:] for log in logs)
                )
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout} s:\n" + "\n".join(log.read_text()[-3000:] for log in logs))


def _masked(report: str) -> str:
    """The report without its wall-clock column (train seconds differ from run to run)."""
    return re.sub(r"\| [0-9]+ \|$", "| s |", report, flags=re.M)


def test_submitted_arms_run_side_by_side_survive_a_killed_worker_and_report_as_serial_arms(
    tmp_path, tiny_model_dir, prefect_server_url, mlflow_server_url
):
    import yaml
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from prefect.settings import PREFECT_API_URL, temporary_settings

    tracking_uri, _ = mlflow_server_url
    tiny = yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"]["tiny"]
    tiny_profile = {**tiny, "eval": {**tiny["eval"], "max_consistency_groups": 2, "max_diversity_tasks": 1}}
    submitter, serial = (
        _project(tmp_path / "submitter", tiny_model_dir, tiny_profile),
        _project(tmp_path / "serial", tiny_model_dir, tiny_profile),
    )
    workers = {w: _project(tmp_path / f"worker-{w}", tiny_model_dir, tiny_profile) for w in ("a", "b")}
    store = tmp_path / "store"
    # a run silent for 50 s is crashed: heartbeats come every 30 s (Prefect's minimum), 20 s of slack on a busy machine
    env = {**os.environ, "PREFECT_API_URL": prefect_server_url, "GROUPWISE_TRACKING_URI": tracking_uri, "OMP_NUM_THREADS": "1",
           "GROUPWISE_STUDY_SILENT_AFTER_SECONDS": "50", "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_WORKER_PREFETCH_SECONDS": "0"}  # fmt: skip
    prefect = [sys.executable, "-m", "prefect"]
    logs = {w: tmp_path / f"worker-{w}.log" for w in workers}
    procs = {}
    for w, project in workers.items():
        with logs[w].open("w") as fh:  # --limit 1: one arm per worker at a time, as one GPU each
            procs[w] = subprocess.Popen([*prefect, "worker", "start", "--pool", POOL, "--type", "process", "--limit", "1", "--name", f"worker-{w}"],
                                        cwd=project, env={**env, "GROUPWISE_PROJECT_DIR": str(project)}, stdout=fh,
                                        stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

    # side by side needs both workers polling before the arms are submitted (a worker takes ~20 s to start on a busy machine)
    def both_online():
        from prefect.exceptions import PrefectHTTPStatusError

        with temporary_settings({PREFECT_API_URL: prefect_server_url}), get_client(sync_client=True) as client:
            try:
                online = [w.name for w in client.read_workers_for_work_pool(POOL) if w.status.value == "ONLINE"]
            except PrefectHTTPStatusError as exc:  # 404: the first worker has not created the pool yet
                if exc.response.status_code != 404:
                    raise
                return None
        return online if {f"worker-{w}" for w in workers} <= set(online) else None

    _wait("both workers online", both_online, 300, list(procs.values()), list(logs.values()))
    submit_log = tmp_path / "submit.log"
    started = time.monotonic()
    with submit_log.open("w") as fh:
        submit = subprocess.Popen([sys.executable, "-m", "flows.cli", "study", "--submit", "--work-pool", POOL, "--concurrency", "2",
                                   "--store", str(store), "--params", str(submitter / "params.yaml")],
                                  cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    everything = [*logs.values(), submit_log]
    try:
        # kill the worker that trains "long" once the store holds a resumable state of it and before it is trained
        def long_saved():
            saved = list(store.glob("study/long/state-*/resume/step-*/progress.json"))
            return saved if saved and not list(store.glob("study/long/state-*/latest")) else None

        _wait("a saved state of arm long", long_saved, 400, [submit, *procs.values()], everything)
        (victim,) = [w for w, p in workers.items() if (p / "data/study/long/checkpoints/resume").is_dir()]
        os.killpg(procs[victim].pid, signal.SIGKILL)  # at once (the arm trains on): the worker and the arm's process, no goodbye
        killed_at = time.monotonic() - started
        procs[victim].wait(timeout=10)
        assert not list(store.glob("study/long/state-*/latest")), "arm long finished training before the kill"
        with temporary_settings({PREFECT_API_URL: prefect_server_url}), get_client(sync_client=True) as client:
            by_arm = {
                arm: client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"arm:{arm}"]))) for arm in ARMS
            }
        brief = {arm: [(r.name, r.state_name, r.run_count, sorted(r.tags)) for r in found] for arm, found in by_arm.items()}
        assert all(len(r) == 1 for r in by_arm.values()), brief  # one flow run per arm, the killed one included
        submit.wait(timeout=600)
        pool_seconds = time.monotonic() - started
    finally:
        for proc in (submit, *procs.values()):
            stop(proc)
    out = submit_log.read_text()
    assert submit.returncode == 0, out[-4000:]
    survivor = next(w for w in workers if w != victim)

    with temporary_settings({PREFECT_API_URL: prefect_server_url}), get_client(sync_client=True) as client:
        runs = {arm: client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"arm:{arm}"])))[0] for arm in ARMS}
        history = {arm: [(s.name, s.message or "") for s in client.read_flow_run_states(r.id)] for arm, r in runs.items()}
    assert all(r.state.is_completed() for r in runs.values()), {a: r.state for a, r in runs.items()}
    # side by side: each arm started before the other had ended (the first attempt of "long" ended at the kill)
    short, long_ = runs["short"], runs["long"]
    assert max(short.start_time, long_.start_time) < short.end_time, (short.start_time, short.end_time, long_.start_time)
    # the killed arm was retried by Prefect (a second run of the same flow run) and resumed from the store
    names = [name for name, _ in history["long"]]
    assert long_.run_count == 2 and names.count("Running") == 2, history["long"]
    assert ("Crashed", "no heartbeat for 50 s: its worker is gone") in history["long"] and "AwaitingRetry" in names, history["long"]
    assert "[study/long] Running (run 2)" in out, out[-3000:]
    assert (workers[survivor] / "data/study/long/checkpoints/latest/train_state.json").is_file()  # finished on the other worker
    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name("groupwise").experiment_id
    (parent,) = client.search_runs([experiment], filter_string=f"tags.`groupwise.work_pool` = '{POOL}'")  # the submitter's study run
    children = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    attempts = [r for r in children if r.info.run_name == "study/long"]  # the killed attempt and the retry, both under it
    assert len(attempts) == 2 and sum(r.info.run_name == "study/short" for r in children) == 1, [r.info.run_name for r in children]
    trains = [t for a in attempts for t in client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{a.info.run_id}'")
              if t.info.run_name == "train"]  # fmt: skip
    assert sorted(t.data.tags["train.resumed"] for t in trains) == ["False", "True"]  # the retry resumed
    assert {f.path for f in client.list_artifacts(parent.info.run_id, "study")} >= {"study/report.md", "study/table.csv"}

    # the same arms run serially by `groupwise study` (its own process: this one keeps no Prefect client
    # bound to another server; its own tracking store; one thread as the workers)
    started = time.monotonic()
    serial_env = {k: v for k, v in env.items() if k != "GROUPWISE_TRACKING_URI"}
    done = subprocess.run([sys.executable, "-m", "flows.cli", "study", "--params", str(serial / "params.yaml")], cwd=ROOT,
                          env=serial_env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"pool: {pool_seconds:.0f} s (worker killed at {killed_at:.0f} s); serial: {time.monotonic() - started:.0f} s")
    merged, alone = (p / "results/consistency/report.md" for p in (submitter, serial))
    (merged_page, merged_code), (alone_page, alone_code) = (p.read_text().split("\n## Code\n") for p in (merged, alone))
    assert _masked(merged_page) == _masked(alone_page)
    # each arm's code: the serial arms ran this checkout's commit; the workers ran the project copy's own
    # components/ (their working directory, not a git checkout), whose commit nothing can know
    assert f"| long | `{code_version().commit[:12]}` |" in alone_code and "| long | `unknown` | unknown |" in merged_code
    timing = ["train_seconds", "eval_seconds"]
    tables = [pd.read_csv(p / "results/consistency/table.csv").drop(columns=timing) for p in (submitter, serial)]
    pd.testing.assert_frame_equal(*tables)
    for arm in ARMS:
        metrics = [json.loads((p / f"results/consistency/arms/{arm}/metrics.json").read_text()) for p in (submitter, serial)]
        assert metrics[0]["consistency"] == metrics[1]["consistency"], arm
    # the killed arm, resumed on the other worker, trained the very adapter of the uninterrupted run
    adapter = "data/study/long/checkpoints/latest/adapter/adapter_model.safetensors"
    assert (workers[survivor] / adapter).read_bytes() == (serial / adapter).read_bytes()
    logs = [pd.read_csv(p / "results/consistency/arms/long/train_log.csv") for p in (submitter, serial)]
    timing = [c for c in logs[0].columns if c.endswith(("_time_s", "_per_s")) or c.startswith("time/")]  # wall clock
    assert list(logs[0]["step"]) == list(range(1, 9))
    pd.testing.assert_frame_equal(logs[0].drop(columns=timing), logs[1].drop(columns=timing))  # step 1 before the kill, the rest after


class _LostResponse(httpx.BaseTransport):
    """Transport of a busy server (labelled fake network, real server behind it): the first POST to
    create a flow run reaches the server, which creates the run, and its answer is lost (read
    timeout), so Prefect's client sends the same request again."""

    def __init__(self, transport):
        self.transport, self.lost = transport, 0

    def handle_request(self, request):
        response = self.transport.handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/create_flow_run") and not self.lost:
            response.read()
            self.lost += 1
            raise httpx.ReadTimeout("answer lost", request=request)
        return response

    def close(self):
        self.transport.close()


def test_an_arm_is_created_once_when_the_servers_answer_is_lost_and_the_client_sends_again(prefect_server_url):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_RETRY_JITTER_FACTOR, temporary_settings

    from flows.study_deployment import submit_arm

    with temporary_settings({PREFECT_API_URL: prefect_server_url, PREFECT_CLIENT_RETRY_JITTER_FACTOR: 0}):
        with get_client(sync_client=True) as client:
            flow_id = client.create_flow_from_name(f"lost-answer-{uuid.uuid4().hex[:8]}")
            deployment = client.create_deployment(flow_id, "lost-answer")
            runs = lambda: client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment])))  # noqa: E731
            flaky = client._client._transport = _LostResponse(client._client._transport)
            run = submit_arm(client, deployment, "study-arm-a", {}, ["arm:a"], submission="s1")
            assert flaky.lost == 1  # the answer was lost once and the request sent again
            assert [r.id for r in runs()] == [run.id]  # the repeat got the run the first request created
            # without the key (Prefect's plain call) the same lost answer leaves two runs of one arm
            flaky.lost = 0
            client.create_flow_run_from_deployment(deployment, parameters={}, tags=["arm:b"], name="study-arm-b")
            assert flaky.lost == 1 and sorted(r.name for r in runs()) == ["study-arm-a", "study-arm-b", "study-arm-b"]
