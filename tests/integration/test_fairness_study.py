"""`groupwise study --study fairness` on the tiny model: DiscrimEval's train questions built as
decision groups, arms with seeds and one arm starting from another's adapter, the held-out
decisions of every arm, the report, and no registration."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import torch
from mlflow import MlflowClient

from components.config import load_params
from flows.study import study
from tests.conftest import make_project, seed_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

DECISIONS = {"weights": {"entropy_helpfulness": 0.0, "stability": 0.0, "decision_parity": 1.0}}
STUDY = {
    "profile": "tiny",
    "report": "fairness",
    "arms": {
        "base": {"kind": "decoding", "description": "base against itself", "overrides": {"eval": {"candidate": {"source": "base"}}}},
        # counterfactual logit pairing: its gradient goes through the log-odds themselves, so the random tiny model
        # (which almost never samples "yes" or "no", whose decision rewards are then 0) moves too
        "parity": {"description": "pairing", "seeds": [1, 2], "overrides": {"train": {"objective": "counterfactual_logit_pairing"}}},
        "continued": {"description": "decision parity from pairing's adapter", "seeds": [1, 2], "start_from": "parity",
                      "overrides": {"reward": {**DECISIONS, "decision_target": "reference_mean"}, "train": {"beta": 0.1, "reference": "start"}}},
    },
}  # fmt: skip


def test_fairness_study_trains_on_train_questions_and_judges_held_out_ones(tmp_path, tiny_model_dir, prefect_harness):
    tiny_data = {"decision_groups": {"benchmark": "discrim_eval", "axis": "gender", "ages": [60], "races": ["white"]},
                 "max_chars": 1500, "max_prompt_tokens": 400}  # fmt: skip
    project = make_project(tmp_path / "p", "tiny", {"studies.fairness": STUDY, "profiles.tiny.data": tiny_data,
                                                   "profiles.tiny.train.domains": ["discrim_eval"]})  # fmt: skip
    seed_tiny_model(project, tiny_model_dir)
    study(str(project / "params.yaml"), None, "fairness")

    groups = [json.loads(line) for line in (project / "data/groups/consistency.jsonl").read_text().splitlines()]
    decided = [g for g in groups if g.get("decision")]
    assert len(decided) == 50 and {g["split"] for g in decided} == {"train"}  # 50 train questions x age 60 x white
    heldout = set(json.loads((project / "data/benchmarks/discrim_eval/manifest.json").read_text())["split"]["heldout"])
    assert not heldout & {g["decision"]["question_id"] for g in decided}

    arms = project / "results/fairness/arms"
    expected = ["base", "parity-s1", "parity-s2", "continued-s1", "continued-s2"]
    assert sorted(p.name for p in arms.iterdir()) == sorted(expected)
    base = pd.read_csv(arms / "base/decisions.csv")
    assert set(base["question_id"]) <= heldout and (base["base_logit"] == base["tuned_logit"]).all()  # deterministic
    first, second = (pd.read_csv(arms / f"parity-s{i}/decisions.csv") for i in (1, 2))
    assert not first["tuned_logit"].equals(second["tuned_logit"])  # two seeds, two adapters
    record = json.loads((arms / "continued-s1/arm.json").read_text())
    assert record["overrides"]["seed"] == 1 and record["machine"]
    params = load_params(project / "params.yaml")
    log = pd.read_csv(project / "data/study-fairness/continued-s1/checkpoints/latest/train_log.csv")
    assert "decision/spread_mean" in log.columns

    table = pd.read_csv(project / "results/fairness/table.csv")
    assert list(dict.fromkeys(table["arm"])) == expected
    assert set(table["demographic"]) == {"gender_female", "gender_non_binary"}
    cont = table[table["arm"] == "continued-s1"].iloc[0]
    parity = table[(table["arm"] == "parity-s1") & (table["demographic"] == cont["demographic"])].iloc[0]
    assert cont["start_from"] == "parity-s1" and cont["start_score"] == pytest.approx(parity["tuned_score"])
    page = (project / "results/fairness/report.md").read_text()
    assert "| parity | gender_female | 2 |" in page and "| continued-s2 |" in page
    assert (project / "results/fairness/plot.png").stat().st_size > 1000
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert client.search_registered_models() == []  # arms never touch the registry

    # a fresh clone has the results but no adapters: an arm that starts from a finished arm trains it again first
    from safetensors.torch import load_file

    weights = project / "data/study-fairness/parity-s1/checkpoints/latest/adapter/adapter_model.safetensors"
    before, stamp = load_file(weights), (arms / "parity-s1/arm.json").stat().st_mtime_ns
    shutil.rmtree(project / "data/study-fairness")
    (arms / "continued-s1/arm.json").unlink()  # the dependent arm is not finished
    study(str(project / "params.yaml"), ["continued-s1"], "fairness")
    assert (arms / "parity-s1/arm.json").stat().st_mtime_ns == stamp  # its results stand
    again = load_file(weights)
    assert all(torch.allclose(before[k], again[k], atol=1e-6) for k in before)  # seeded: the same adapter
    assert (arms / "continued-s1/arm.json").is_file() and not (project / "data/study-fairness/parity-s2").exists()
