"""A tracking server restarted in the middle of training: a real `mlflow server` is stopped after the
second step's metrics, kept down for 60 s and started again on the same port and store while `train` runs on
the tiny model. Training keeps going (no step waits on MLflow's retries), the records measured while
the server was away arrive once it is back, stamped with the time they were measured, and the run
ends FINISHED with every step's metrics and its artifacts."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import pytest
from mlflow import MlflowClient

from components.config import load_params
from components.tracking.outbox import Outbox
from flows import steps
from tests.conftest import make_project, seed_tiny_model
from tests.integration.servers import free_port, mlflow_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

STEPS = 12  # on an idle machine training ends inside the outage: the step then waits for the server at its end
DOWN_FOR = 60.0


def test_training_outlives_a_tracking_server_restart_and_loses_no_record(tiny_model_dir, tmp_path, capfd, monkeypatch):
    store, artifacts, port = f"sqlite:///{tmp_path / 'server.db'}", tmp_path / "artifacts", free_port()
    server = ExitStack()
    url = server.enter_context(mlflow_server(store, artifacts, port))
    project = make_project(tmp_path / "p", "tiny", {"tracking.uri": url})
    seed_tiny_model(project, tiny_model_dir)
    params = load_params(project / "params.yaml")
    params = params.model_copy(update={"train": params.train.model_copy(update={"steps": STEPS})})
    steps.build(params)
    steps.validate(params)
    client = MlflowClient(tracking_uri=url)
    outage: dict[str, float] = {}
    real_metrics = Outbox.metrics

    def restart_later() -> None:
        time.sleep(DOWN_FOR)
        outage["up"] = time.time()
        server.enter_context(mlflow_server(store, artifacts, port))

    def metrics_then_stop_the_server(self, metrics, step=None, prefix=""):
        real_metrics(self, metrics, step, prefix)
        if step == 2 and "down" not in outage:  # right after step 2's metrics: the server goes away for DOWN_FOR
            server.close()
            outage["down"] = time.time()
            threading.Thread(target=restart_later, daemon=True).start()

    monkeypatch.setattr(Outbox, "metrics", metrics_then_stop_the_server)
    try:
        result = steps.train(params)
        deadline = time.monotonic() + DOWN_FOR + 180
        while "up" not in outage and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        if "up" not in outage:
            server.close()
            server.enter_context(mlflow_server(store, artifacts, port))  # for the checks below
    assert set(outage) == {"down", "up"}, "the server was not restarted"

    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    loss = client.get_metric_history(run.info.run_id, "train.loss")
    assert sorted(m.step for m in loss) == list(range(1, STEPS + 1)), "a step's metrics were lost"
    # training went on while the server was down: several steps were measured then (a step that waited on
    # MLflow's retries would hold the next one until the server was back: at most one inside the window)
    measured_while_down = [m.step for m in loss if outage["down"] * 1000 < m.timestamp < outage["up"] * 1000]
    assert len(measured_while_down) >= 2, f"steps measured while the server was down: {measured_while_down}"
    logged = {f.path for f in client.list_artifacts(run.info.run_id, "train")}
    assert {"train/train_log.csv", "train/adapter"} <= logged
    err = capfd.readouterr().err
    assert "not answering: training goes on" in err and "back: the records kept while it was away are sent" in err
