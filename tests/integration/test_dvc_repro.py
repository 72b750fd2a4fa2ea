"""`dvc repro` runs the same pipeline from params.yaml (tiny profile) in a temporary git copy; the
project's local remote takes `dvc push` / `dvc pull`; `dvc exp run -S` varies a param and
`dvc metrics diff` / `dvc plots diff` compare; the Prefect flow gives the same metrics as DVC."""

import json
import os
import shutil
import subprocess

import pytest
import yaml
from mlflow import MlflowClient

from components.config import load_params
from flows.retrain import retrain
from tests.conftest import ROOT, make_project

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


def dvc(project, *args):
    result = subprocess.run(["dvc", *args], cwd=project, capture_output=True, text=True, env=os.environ.copy())
    assert result.returncode == 0, f"dvc {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def git(project, *args):
    ident = ["-c", "user.name=groupwise-test", "-c", "user.email=test@groupwise.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *ident, *args], cwd=project, check=True, capture_output=True, text=True)


def test_dvc_repro_remote_experiments_and_flow_parity(tmp_path, prefect_harness):
    project = make_project(tmp_path / "project", "tiny")
    git(project, "init", "-q")
    dvc(project, "init", "-q")
    shutil.copy2(ROOT / ".dvc/config", project / ".dvc/config")  # the project's default local remote
    shutil.copy2(ROOT / ".gitignore", project / ".gitignore")  # what the real repository keeps in git
    dvc(project, "repro")

    lock = (project / "dvc.lock").read_text()
    for stage in ("build", "validate", "prepare-model", "prepare-benchmarks", "train", "evaluate", "register"):
        assert f"  {stage}:" in lock
    shown = json.loads(dvc(project, "metrics", "show", "--json"))
    metrics = next(iter(shown.values()))["data"]["data/reports/metrics.json"]["data"]
    assert metrics["consistency"]["n_groups"] == 6
    assert json.loads((project / "data/registry/decision.json").read_text())["passed"] is True
    assert (project / "data/registry/gates.md").read_text().startswith("**Gates: passed**")

    plots = json.loads(dvc(project, "plots", "show", "--json"))
    assert {"entropy_gap_per_group", "training"} <= set(plots["data"])
    assert plots["data"]["entropy_gap_per_group"][0]["type"] == "vega"
    # every plot drawn from the evaluate stage's outputs exists and renders (vega: tables, image: PNGs)
    pipeline = yaml.safe_load((project / "dvc.yaml").read_text())
    evaluate_outs = {next(iter(out)) if isinstance(out, dict) else out for out in pipeline["stages"]["evaluate"]["outs"]}
    checked = []
    for plot in pipeline["plots"]:
        name, sources = (plot, [plot]) if isinstance(plot, str) else (next(iter(plot)), list(next(iter(plot.values()))["y"]))
        if set(sources) <= evaluate_outs:  # else another stage's plot (training)
            assert all((project / source).is_file() for source in sources), name
            (shown,) = plots["data"][name]
            assert shown["type"] == ("image" if name.endswith(".png") else "vega"), name
            checked.append(name)
    assert {"entropy_gap_per_group", "coverage_per_task", "metric_deltas", "data/reports/metric_deltas.png"} <= set(checked)

    again = dvc(project, "repro")
    assert "didn't change, skipping" in again and "Running stage" not in again
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "baseline")

    # push groups, base model and checkpoint to the local remote; lose them and the cache; pull back
    dvc(project, "push")
    remote = project / ".dvc-remote"
    assert sum(1 for p in remote.rglob("*") if p.is_file()) >= 3
    adapter = project / "data/checkpoints/latest/adapter/adapter_model.safetensors"
    before = adapter.read_bytes()
    for folder in ("data/groups", "data/checkpoints/latest", ".dvc/cache"):
        shutil.rmtree(project / folder)
    dvc(project, "pull")
    assert adapter.read_bytes() == before and (project / "data/groups/consistency.jsonl").is_file()
    assert "up to date" in dvc(project, "status")

    # an experiment with another learning rate; DVC writes 2e-05, which YAML reads as a string.
    # The file lists the tiny profile's values (make_project writes it in), and a listed value runs.
    dvc(project, "exp", "run", "-S", "train.lr=2e-05")
    raw = yaml.safe_load((project / "params.yaml").read_text())
    assert raw["train"]["lr"] == "2e-05" and raw["profile"] == "tiny"  # DVC's pitfall...
    assert load_params(project / "params.yaml").train.lr == pytest.approx(2e-05)  # ...coerced to a float
    experiments = json.loads(dvc(project, "exp", "show", "--json"))
    lrs = {
        str(exp["data"]["params"]["params.yaml"]["data"]["train"]["lr"])
        for rev in experiments for exp in (rev.get("experiments") or []) for exp in exp.get("revs", [])
    }  # fmt: skip
    assert "2e-05" in lrs
    # the experiment's train run in MLflow ran the value `dvc exp show` lists
    client = MlflowClient(tracking_uri=load_params(project / "params.yaml").tracking.uri)
    experiment = client.get_experiment_by_name(load_params(project / "params.yaml").tracking.experiment)
    (train_run,) = client.search_runs(
        [experiment.experiment_id], "attributes.run_name = 'train'", order_by=["attributes.start_time DESC"], max_results=1
    )
    assert float(train_run.data.params["train.lr"]) == pytest.approx(2e-05)
    diff = json.loads(dvc(project, "metrics", "diff", "HEAD", "--json"))["data/reports/metrics.json"]
    assert diff["consistency.tuned_mean_gap"]["new"] != diff["consistency.tuned_mean_gap"]["old"]
    assert "consistency.base_mean_gap" not in diff  # unchanged: same base model, prompts and seeds
    plot_diff = json.loads(dvc(project, "plots", "diff", "HEAD", "--json"))
    (gap_plot,) = plot_diff["data"]["entropy_gap_per_group"]
    assert set(gap_plot["revisions"]) == {"HEAD", "workspace"}

    # the Prefect flow, from the same params.yaml, gives the same metrics as `dvc exp run` did
    by_dvc = json.loads((project / "data/reports/metrics.json").read_text())
    retrain(str(project / "params.yaml"))
    by_flow = json.loads((project / "data/reports/metrics.json").read_text())
    # same evaluation params and base model; the adapter's bytes may differ in the last bits (this
    # process and DVC's subprocess run torch with other thread counts), so its hash is not compared
    bound_dvc, bound_flow = by_dvc.pop("evaluated"), by_flow.pop("evaluated")
    assert {k: bound_dvc[k] for k in ("params_sha256", "base_weights_sha256")} == {
        k: bound_flow[k] for k in ("params_sha256", "base_weights_sha256")
    }
    assert by_flow == by_dvc
