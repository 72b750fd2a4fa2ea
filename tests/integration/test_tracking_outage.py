"""A tracking server restarted in the middle of training: a real `mlflow server` is stopped after the
second step, kept down for 60 s and started again on the same port and store while `train` runs on
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
from flows import steps
from tests.conftest import make_project, seed_tiny_model
from tests.integration.servers import free_port, mlflow_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

STEPS = 12  # on an idle machine training ends inside the outage: the step then waits for the server at its end
DOWN_FOR = 60.0


def test_training_outlives_a_tracking_server_restart_and_loses_no_record(tiny_model_dir, tmp_path, capfd):
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

    def restart_mid_run() -> None:
        experiment = client.get_experiment_by_name(params.tracking.experiment)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            found = client.search_runs([experiment.experiment_id], "attributes.run_name = 'train'")
            if found and len(client.get_metric_history(found[0].info.run_id, "train.loss")) >= 2:
                break
            time.sleep(0.2)
        outage["down"] = time.time()
        server.close()
        time.sleep(DOWN_FOR)
        outage["up"] = time.time()
        server.enter_context(mlflow_server(store, artifacts, port))

    restarter = threading.Thread(target=restart_mid_run, daemon=True)
    restarter.start()
    try:
        result = steps.train(params)
        restarter.join(timeout=DOWN_FOR + 180)
    finally:
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
