"""Tracking that ends honestly: runs of dead processes are closed, a fresh SQLite store survives two
processes starting at once. Real MLflow (SQLite), real processes, SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from components.config import TrackingConfig
from components.tracking import runs
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# a step that dies in the middle: SIGKILL leaves MLflow no chance to end its run
KILLED_STEP = """
import os, signal, sys
from pathlib import Path
from components.config import TrackingConfig
from components.tracking import runs
cfg = TrackingConfig(uri=sys.argv[1], artifact_location=Path(sys.argv[2]), experiment="integrity")
with runs.step_run(cfg, "train") as run_id:
    print(run_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""

# first use of a fresh store, from several processes at the same moment
FIRST_USE = """
import sys, time
from pathlib import Path
from components.config import TrackingConfig
from components.tracking import runs
cfg = TrackingConfig(uri=sys.argv[1], artifact_location=Path(sys.argv[2]), experiment="integrity")
go = Path(sys.argv[3])
(go.parent / f"ready-{sys.argv[4]}").touch()
while not go.exists():
    time.sleep(0.002)
with runs.step_run(cfg, "build") as run_id:
    runs.log_metrics({"x": 1.0})
print(run_id)
"""


def _cfg(tmp_path: Path) -> TrackingConfig:
    return TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=tmp_path / "artifacts", experiment="integrity")


def test_a_run_left_running_by_a_killed_process_is_closed_by_the_next(tmp_path, capfd):
    cfg = _cfg(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", KILLED_STEP, cfg.uri, str(cfg.artifact_location)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == -9, proc.stderr[-2000:]
    dead = proc.stdout.split()[0]
    client = MlflowClient(tracking_uri=cfg.uri)
    assert client.get_run(dead).info.status == "RUNNING"  # what MLflow alone leaves behind

    alive = runs.start_parent_run(cfg, "live-flow")  # this process: alive, must stay RUNNING
    runs._CLEANED.clear()  # a new process would start with nothing closed yet
    runs.configure(cfg)
    assert client.get_run(dead).info.status == "KILLED"
    assert "died with the run RUNNING" in client.get_run(dead).data.tags["groupwise.closed_because"]
    assert client.get_run(alive).info.status == "RUNNING"
    assert f"run {dead} (train) was left RUNNING by dead process" in capfd.readouterr().err
    runs.end_parent_run(alive)


def test_processes_starting_at_once_on_a_fresh_sqlite_store_all_finish(tmp_path):
    cfg = _cfg(tmp_path)
    assert not (tmp_path / "mlflow.db").exists()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", FIRST_USE, cfg.uri, str(cfg.artifact_location), str(go), str(i)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(3)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{i}").exists() for i in range(3)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    go.touch()
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    client = MlflowClient(tracking_uri=cfg.uri)
    experiment = client.get_experiment_by_name("integrity")
    finished = client.search_runs([experiment.experiment_id])
    assert len(finished) == 3 and {r.info.status for r in finished} == {"FINISHED"}
