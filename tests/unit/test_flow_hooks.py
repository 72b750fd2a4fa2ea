"""The retrain flow's Prefect state hooks, called as Prefect calls them, against a real MLflow store."""

from __future__ import annotations


def test_the_flows_state_hook_closes_its_runs_killed_on_cancel_and_failed_on_crash(tmp_path):
    """`close_runs_of_flow_run` as Prefect calls it (flow, flow run, state) in a process that has
    nothing of the stopped one: the parent run tagged with the flow run's id and its RUNNING child
    are closed; a finished child and another flow run's parent stay as they were."""
    import uuid

    import yaml
    from mlflow import MlflowClient
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Cancelling, Crashed

    from components.config import load_params
    from components.tracking import runs
    from flows.retrain import FLOW_RUN_TAG, close_runs_of_flow_run

    params_path = tmp_path / "params.yaml"
    params_path.write_text(yaml.safe_dump({"tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    cfg = load_params(params_path).tracking
    client = MlflowClient(cfg.uri)
    for state, status in ((Cancelling(), "KILLED"), (Crashed(), "FAILED")):
        flow_run = FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4(), name="a-run", parameters={"params_path": str(params_path)})
        parent = runs.start_parent_run(cfg, "retrain", tags={FLOW_RUN_TAG: str(flow_run.id)})
        other = runs.start_parent_run(cfg, "retrain", tags={FLOW_RUN_TAG: str(uuid.uuid4())})
        with runs.step_run(cfg, "build", None, parent) as finished:
            pass
        running = client.create_run(client.get_run(parent).info.experiment_id, tags={"mlflow.parentRunId": parent}).info.run_id
        close_runs_of_flow_run(None, flow_run, state)
        statuses = {name: client.get_run(run).info.status for name, run in (("parent", parent), ("running", running),
                                                                              ("finished", finished), ("other", other))}  # fmt: skip
        assert statuses == {"parent": status, "running": status, "finished": "FINISHED", "other": "RUNNING"}
        assert client.get_run(parent).data.tags["groupwise.closed_because"] == f"Prefect flow run {state.name}"
