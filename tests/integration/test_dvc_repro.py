"""`dvc repro` runs the same pipeline from params.yaml (tiny profile) in a temporary copy."""

import json
import os
import subprocess

import pytest

from tests.conftest import make_project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def dvc(project, *args):
    result = subprocess.run(["dvc", *args], cwd=project, capture_output=True, text=True, env=os.environ.copy())
    assert result.returncode == 0, f"dvc {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_dvc_repro_runs_every_stage_and_is_then_up_to_date(tmp_path):
    project = make_project(tmp_path / "project", "tiny")
    dvc(project, "init", "--no-scm", "-q")
    dvc(project, "repro")

    lock = (project / "dvc.lock").read_text()
    for stage in ("build_groups", "validate_groups", "prepare_base_model", "train", "evaluate", "register"):
        assert f"  {stage}:" in lock
    shown = json.loads(dvc(project, "metrics", "show", "--json"))
    metrics = next(iter(shown.values()))["data"]["data/reports/metrics.json"]["data"]
    assert metrics["consistency"]["n_groups"] == 6
    assert json.loads((project / "data/registry/decision.json").read_text())["passed"] is True

    plots = json.loads(dvc(project, "plots", "show", "--json"))
    assert {"entropy_gap_per_group", "training"} <= set(plots["data"])
    assert plots["data"]["entropy_gap_per_group"][0]["type"] == "vega"

    again = dvc(project, "repro")
    assert "didn't change, skipping" in again and "Running stage" not in again
