"""The README's two commands in order: in a copy of the checkout (every file git tracks or would
track), the retrain flow that `make run` runs (tiny profile), then the README's test of its
generated blocks. The copy's own run differs from the committed reference, and the README test
still passes: the README reads the reference from results/reference-run/, which no run writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from flows.retrain import retrain
from tests.conftest import ROOT, benchmark_data, seed_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
REFERENCE = ROOT / "results" / "reference-run"


def checkout_copy(dest):
    """Every file of the working tree that git tracks or would track (not ignored), as a clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree is listed until committed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def test_make_run_then_the_readme_test_pass_in_order_while_the_run_differs_from_the_reference(tmp_path, tiny_model_dir, prefect_harness):
    clone = checkout_copy(tmp_path / "clone")
    committed = {path: path.read_bytes() for path in REFERENCE.iterdir()}
    seed_tiny_model(clone, tiny_model_dir)
    shutil.copytree(benchmark_data(), clone / "data" / "benchmarks")

    summary = retrain(str(clone / "params.yaml"), profile="tiny")
    assert summary.results[-1].step == "register"

    # the run wrote its own reports where DVC expects them, and they are not the reference's
    ran = json.loads((clone / "data" / "reports" / "metrics.json").read_text())
    reference = json.loads((REFERENCE / "metrics.json").read_text())
    assert ran["consistency"]["n_groups"] != reference["consistency"]["n_groups"]
    assert ran["consistency"]["tuned_mean_gap"] != reference["consistency"]["tuned_mean_gap"]
    assert {p.name: p.read_bytes() for p in (clone / "results" / "reference-run").iterdir()} == {
        p.name: b for p, b in committed.items()
    }  # the run left the reference as committed

    # the README's test, run in the copy as `make test` runs it there
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    readme_test = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "tests/unit/test_readme_results.py"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert readme_test.returncode == 0, readme_test.stdout[-4000:] + readme_test.stderr[-2000:]
    assert " passed" in readme_test.stdout and "failed" not in readme_test.stdout
