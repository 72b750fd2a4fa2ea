"""Two registrations (and two promotions) running at once in two real processes leave the aliases
consistent: on SQLite-backed MLflow and on a real `mlflow server` (PostgreSQL when available)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from components.tracking.model_registry import FINGERPRINT_TAG, HISTORY_TAG
from tests.conftest import ROOT
from tests.integration.registry_helpers import good_metrics, registry_project, write_adapter, write_metrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
# a name of its own: the session's MLflow server is shared with other tests (e.g. test_schedule
# registers the default name), and this test counts versions from 1
NAME = "groupwise-concurrency-test"

# imports first, then wait for the shared start signal so that both processes really overlap
WORKER = """
import json, sys, time
from pathlib import Path
from components.config import load_params
from flows import steps
from flows.promote import promote
params = load_params(sys.argv[1])
go = Path(sys.argv[2])
(go.parent / f"ready-{sys.argv[-1]}").touch()
while not go.exists():
    time.sleep(0.005)
if sys.argv[3] == "register":
    print(json.dumps(steps.register(params).metrics, default=str))
else:
    result = promote(params, sys.argv[4], reason="concurrent")
    print(json.dumps({"version": result.version, "previous": result.previous}))
"""


def run_together(jobs: list[list[str]], go: Path, env: dict) -> list[dict]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, *job, f"job{i}"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for i, job in enumerate(jobs)
    ]
    ready = [go.parent / f"ready-job{i}" for i in range(len(jobs))]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready):  # both have imported everything and poll for the signal
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [p.poll() for p in procs]
        time.sleep(0.1)
    go.touch()
    outputs = [p.communicate(timeout=300) for p in procs]
    for path in (go, *ready):
        path.unlink()
    for proc, (_out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def assert_consistent(client: MlflowClient) -> dict[str, str]:
    """Every alias points at an existing, fully tagged version; the champion history agrees."""
    model = client.get_registered_model(NAME)
    versions = {str(v.version): v for v in client.search_model_versions(f"name = '{NAME}'")}
    for alias, version in model.aliases.items():
        tags = versions[str(version)].tags
        assert tags.get("gate.passed") == "true" and FINGERPRINT_TAG in tags and "metric.consistency.tuned_mean_gap" in tags, alias
    fingerprints = [v.tags[FINGERPRINT_TAG] for v in versions.values()]
    assert len(fingerprints) == len(set(fingerprints)), "one fingerprint registered twice"
    if HISTORY_TAG in model.tags:
        history = json.loads(model.tags[HISTORY_TAG])
        assert history[-1] == str(model.aliases["champion"])
        if "previous-champion" in model.aliases:
            assert history[-2] == str(model.aliases["previous-champion"])
    return {alias: str(v) for alias, v in model.aliases.items()}


@pytest.mark.parametrize("backend", ["sqlite", "server"])
def test_concurrent_registrations_and_promotions_keep_aliases_consistent(backend, tmp_path, tiny_model_dir, request):
    if backend == "server":
        uri, kind = request.getfixturevalue("mlflow_server_url")
        if os.environ.get("GROUPWISE_REQUIRE_POSTGRES") == "1":
            assert kind == "postgresql"  # what CI promises: the server tests ran on PostgreSQL
    else:
        uri, kind = f"sqlite:///{tmp_path / 'shared' / 'mlflow.db'}", "sqlite"
    env = {**os.environ, "GROUPWISE_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
    projects = []
    for index, gap in enumerate((0.30, 0.29)):
        project = registry_project(tmp_path / f"p{index}", tiny_model_dir, {"registry.model_name": NAME})
        write_adapter(project, seed=10 + index)
        write_metrics(project, good_metrics(tuned_mean_gap=gap))
        projects.append(project)
    (tmp_path / "shared").mkdir(exist_ok=True)
    go = tmp_path / "go"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)

    # two different adapters at once: two versions, challenger on the newer one
    results = run_together([[str(p / "params.yaml"), str(go), "register"] for p in projects], go, env)
    assert sorted(r["version"] for r in results) == ["1", "2"], (kind, results)
    assert assert_consistent(client) == {"challenger": "2"}

    # the same adapter twice at once: registered once (the second finds the fingerprint under the lock)
    write_adapter(projects[1], seed=99)
    write_metrics(projects[1], good_metrics(tuned_mean_gap=0.29))  # the new adapter's evaluation
    results = run_together([[str(projects[1] / "params.yaml"), str(go), "register"]] * 2, go, env)
    assert [r["version"] for r in results] == ["3", "3"] and sorted(r["reused"] for r in results) == [False, True]
    assert len(client.search_model_versions(f"name = '{NAME}'")) == 3
    assert assert_consistent(client) == {"challenger": "3"}

    # two promotions at once: serialised, so the loser's champion becomes previous-champion
    results = run_together([[str(projects[0] / "params.yaml"), str(go), "promote", v] for v in ("1", "2")], go, env)
    first, second = sorted(results, key=lambda r: r["previous"] is not None)
    assert first["previous"] is None and second["previous"] == first["version"]
    state = assert_consistent(client)
    assert state["champion"] == second["version"] and state["previous-champion"] == first["version"]
    assert json.loads(client.get_registered_model(NAME).tags[HISTORY_TAG]) == [first["version"], second["version"]]
