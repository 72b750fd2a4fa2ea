"""The README's two commands in order, and the record a retrain leaves, in a git checkout made from
this one (every file git tracks or would track, committed: what a fresh clone has).

1. The retrain flow that `make run` runs (the tiny profile selected in params.yaml, as a DVC user
   selects one), on a user's own groups file listed among the build stage's deps.
2. The README's test of its generated blocks passes there, while the run's reports differ from the
   committed reference (results/reference-run/, which no run writes).
3. DVC recorded the run: `dvc status` is clean, `dvc push` then `dvc pull` in a second clone gives the
   checkpoint's adapter byte for byte, and the run is a DVC experiment.
4. The groups file edited in place (the example's 13 rows cut to 8) and the same command again: the new rows are
   built and trained on (counts and the groups' hash in the train run's inputs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from mlflow import MlflowClient

from components.config import load_params
from components.config.document import use_profile
from components.hashing import file_sha256
from flows.retrain import retrain
from tests.conftest import ROOT, benchmark_data, seed_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]
REFERENCE = ROOT / "results" / "reference-run"
ADAPTER = "data/checkpoints/latest/adapter/adapter_model.safetensors"
EXAMPLE = (ROOT / "data" / "examples" / "groups.jsonl").read_text().splitlines(keepends=True)  # 13 rows, 7 consistency groups
DIVERSITY = "".join(
    json.dumps({"group_id": f"colour-{i}", "domain": "colours", "task": "diversity", "split": split, "text": text,
                "valid_answers": answers, "answer_normalizer": "casefold_match"}) + "\n"
    for i, (split, text, answers) in enumerate([
        ("train", "Name a primary colour.", ["red", "blue", "yellow"]), ("train", "Name a season.", ["spring", "summer", "autumn|fall", "winter"]),
        ("heldout", "Name a suit of playing cards.", ["hearts", "diamonds", "clubs", "spades"]),
        ("heldout", "Name a state of matter.", ["solid", "liquid", "gas"])])
)  # fmt: skip


def run(cwd, *command, **kwargs) -> str:
    ident = ["-c", "user.name=groupwise-test", "-c", "user.email=test@groupwise.invalid", "-c", "commit.gpgsign=false"]
    command = ["git", *ident, *command[1:]] if command[0] == "git" else list(command)
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=os.environ.copy(), **kwargs)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def checkout_copy(dest):
    """Every file of the working tree that git tracks or would track (not ignored), committed in a new repository."""
    listed = run(ROOT, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree is listed until committed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    run(dest, "git", "init", "-q")
    run(dest, "git", "add", "-A")
    run(dest, "git", "commit", "-q", "-m", "clone")
    return dest


def groups_of(run_data) -> int:
    return int(sum(v for k, v in run_data.metrics.items() if k.startswith("groups.")))


def test_make_run_then_the_readme_test_and_the_run_is_versioned_in_dvc(tmp_path, tiny_model_dir, prefect_harness, monkeypatch):
    for role in ("AUTHOR", "COMMITTER"):  # who `dvc exp save` commits as, on a machine without a git identity
        monkeypatch.setenv(f"GIT_{role}_NAME", "groupwise-test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@groupwise.invalid")
    clone = checkout_copy(tmp_path / "clone")
    committed = {path.name: path.read_bytes() for path in REFERENCE.iterdir()}
    use_profile(clone / "params.yaml", "tiny")
    raw = yaml.safe_load((clone / "params.yaml").read_text())
    raw["data"]["groups_file"] = "data/mine.jsonl"
    (clone / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    pipeline = (clone / "dvc.yaml").read_text()
    (clone / "dvc.yaml").write_text(pipeline.replace("      - data/templates ", "      - data/mine.jsonl\n      - data/templates ", 1))
    own = clone / "data" / "mine.jsonl"
    own.write_text("".join(EXAMPLE) + DIVERSITY)
    run(clone, "git", "add", "-A")
    run(clone, "git", "commit", "-q", "-m", "my groups, the tiny profile")
    seed_tiny_model(clone, tiny_model_dir)
    shutil.copytree(benchmark_data(), clone / "data" / "benchmarks")

    summary = retrain(str(clone / "params.yaml"))
    assert [r.step for r in summary.results][-1] == "register" and "recorded in dvc.lock" in summary.dvc
    assert "saved as DVC experiment retrain-" in summary.dvc, summary.dvc
    params = load_params(clone / "params.yaml")
    tracking = MlflowClient(params.tracking.uri)
    (build,) = [tracking.get_run(r.run_id) for r in summary.results if r.step == "build"]
    assert groups_of(build.data) == 7 + 4  # the example file's 7 groups and 4 diversity tasks

    # the README test passes in the clone, whose run is not the reference
    ran = json.loads((clone / "data" / "reports" / "metrics.json").read_text())
    reference = json.loads((REFERENCE / "metrics.json").read_text())
    assert ran["consistency"]["tuned_mean_gap"] != reference["consistency"]["tuned_mean_gap"]
    assert {p.name: p.read_bytes() for p in (clone / "results" / "reference-run").iterdir()} == committed
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    readme_test = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/test_readme_results.py"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert readme_test.returncode == 0, readme_test.stdout[-4000:] + readme_test.stderr[-2000:]

    # DVC recorded every stage: up to date, an experiment, and pushable to a second clone
    assert "Data and pipelines are up to date" in run(clone, "dvc", "status")
    assert "retrain-" in run(clone, "dvc", "exp", "list", "--name-only")
    run(clone, "git", "add", "-A")
    run(clone, "git", "commit", "-q", "-m", "the retrain")
    run(clone, "dvc", "push")
    second = tmp_path / "second"
    run(tmp_path, "git", "clone", "-q", str(clone), str(second))
    run(second, "dvc", "remote", "modify", "--local", "local", "url", str(clone / ".dvc-remote"))
    run(second, "dvc", "pull")
    assert file_sha256(second / ADAPTER) == file_sha256(clone / ADAPTER)
    assert (second / "data" / "groups" / "consistency.jsonl").read_bytes() == (clone / "data" / "groups" / "consistency.jsonl").read_bytes()

    # the groups file edited in place: the same command builds and trains the new rows
    own.write_text("".join(EXAMPLE[:8]) + DIVERSITY)  # the example's rows cut from 13 to 8
    again = retrain(str(clone / "params.yaml"))
    by_step = {r.step: tracking.get_run(r.run_id) for r in again.results}
    assert groups_of(by_step["build"].data) == 4 + 4  # its first 8 rows: 4 groups
    assert by_step["build"].data.tags["data.source_sha256"] == file_sha256(own)
    trained_on = {d.dataset.name: d.dataset.digest for d in by_step["train"].inputs.dataset_inputs}
    groups_file = clone / "data" / "groups" / "consistency.jsonl"
    assert trained_on["groups/consistency.jsonl"] == file_sha256(groups_file)[:36]  # the train run read the new groups
    first_train = tracking.get_run(next(r.run_id for r in summary.results if r.step == "train"))
    assert {d.dataset.name: d.dataset.digest for d in first_train.inputs.dataset_inputs}["groups/consistency.jsonl"] != trained_on[
        "groups/consistency.jsonl"
    ]
    assert "Data and pipelines are up to date" in run(clone, "dvc", "status")
