"""`groupwise study` on the tiny model: arms, resume, MLflow runs, results files, no registration;
and `dvc exp run` judging the gates without registering."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from components.config import load_params
from components.machine import machine_label, machine_record
from components.validation.suite import groups_sha256
from flows import steps
from flows.study import study
from tests.conftest import ROOT, make_project, seed_tiny_model
from tests.integration.registry_helpers import good_metrics, registry_project, write_adapter, write_metrics

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ARMS = {
    "greedy": {"kind": "decoding", "description": "greedy base", "overrides": {"eval": {"candidate": {"source": "base", "temperature": 0.0}}}},
    "grpo": {"description": "main", "overrides": {"train": {"snapshot_every": 1}}},
    "never-run": {"description": "listed as not run", "overrides": {"reward": {"weights": {"entropy_helpfulness": 1.0, "stability": 0.0}}}},
}  # fmt: skip


def test_study_runs_arms_resumes_and_never_registers(tmp_path, tiny_model_dir, prefect_harness):
    project = make_project(tmp_path / "p", "tiny", {"study": {"profile": "tiny", "learning_curve_arm": "grpo", "arms": ARMS}})
    seed_tiny_model(project, tiny_model_dir)
    params_path = str(project / "params.yaml")
    study(params_path, ["greedy", "grpo"])

    results = project / "results"
    for arm in ("greedy", "grpo"):
        record = json.loads((results / "consistency/arms" / arm / "arm.json").read_text())
        assert record["name"] == arm and len(record["fingerprint"]) == 16 and len(record["groups_sha256"]) == 64
        assert record["eval_time"].startswith("time: ") and "sampling" in record["eval_time"]  # the phases, printed too
        metrics = json.loads((results / "consistency/arms" / arm / "metrics.json").read_text())
        assert metrics["consistency"]["axis"] == "gender" and set(metrics["consistency"]["per_domain"]) == {"investment", "job"}
        kept = pd.read_csv(results / "consistency/arms" / arm / "samples.csv.gz")  # the samples, for metrics added later
        per_group = pd.read_csv(results / "consistency/arms" / arm / "per_group_consistency.csv")
        assert set(kept["model"]) == {"base", "tuned"}
        assert (kept["task"] == "consistency").sum() == 2 * per_group["n_samples"].sum()  # every base and tuned answer
    greedy = json.loads((results / "consistency/arms/greedy/metrics.json").read_text())
    assert greedy["candidate"] == {"source": "base", "temperature": 0.0, "seed_offset": 0}
    assert greedy["consistency"]["tuned_noise_floor"] == 0.0  # greedy: K identical answers, no spread
    trained = json.loads((results / "consistency/arms/grpo/arm.json").read_text())
    assert trained["train_steps"] == 2 and trained["train_samples"] > 0
    curve = pd.read_csv(results / "consistency/arms/grpo/learning_curve.csv")
    assert sorted(curve["step"].unique()) == [0, 1, 2]  # base, the step-1 snapshot, the final adapter
    final = curve[(curve["step"] == 2) & (curve["scope"] == "overall")].iloc[0]
    assert final["tuned_gap"] == pytest.approx(
        json.loads((results / "consistency/arms/grpo/metrics.json").read_text())["consistency"]["tuned_mean_gap"]
    )

    report = (results / "consistency/report.md").read_text()
    assert "| greedy | overall |" in report and "| grpo | overall |" in report
    assert "`never-run`: listed as not run" in report  # arms without results are named, not hidden
    assert (results / "consistency/learning_curve.png").stat().st_size > 1000
    headline = json.loads((results / "consistency/metrics.json").read_text())
    assert set(headline) == {"greedy", "grpo"} and set(headline["grpo"]) == {"investment", "job", "overall"}

    params = load_params(project / "params.yaml")
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert client.search_registered_models() == []  # arms never touch the registry
    (parent,) = client.search_runs([client.get_experiment_by_name(params.tracking.experiment).experiment_id],
                                   filter_string="tags.`groupwise.pipeline` = 'study'")  # fmt: skip
    arms = client.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(r.info.run_name for r in arms) == [
        "build", "prepare-benchmarks", "prepare-model", "study/greedy", "study/grpo", "validate",
    ]  # the shared steps, then one run per arm  # fmt: skip
    grpo_run = next(r for r in arms if r.info.run_name == "study/grpo")
    steps_of_grpo = client.search_runs([parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{grpo_run.info.run_id}'")
    assert {"train", "evaluate", "curve-step-1"} <= {r.info.run_name for r in steps_of_grpo}

    # resume: finished arms are skipped; an arm whose params changed runs again
    stamp = {arm: (results / "consistency/arms" / arm / "arm.json").stat().st_mtime_ns for arm in ("greedy", "grpo")}
    raw = (project / "params.yaml").read_text().replace("temperature: 0.0", "temperature: 0.3")
    (project / "params.yaml").write_text(raw)
    study(params_path, ["greedy", "grpo"])
    assert (results / "consistency/arms/grpo/arm.json").stat().st_mtime_ns == stamp["grpo"]
    assert (results / "consistency/arms/greedy/arm.json").stat().st_mtime_ns != stamp["greedy"]
    assert json.loads((results / "consistency/arms/greedy/metrics.json").read_text())["candidate"]["temperature"] == 0.3


def test_study_names_an_unknown_arm(tmp_path, prefect_harness):
    project = make_project(tmp_path / "p", "tiny", {"study": {"profile": "tiny", "arms": ARMS}})
    with pytest.raises(ValueError, match=r"unknown arm\(s\) \['nope'\].*greedy"):
        study(str(project / "params.yaml"), ["nope"])


def test_a_study_builds_its_groups_with_its_own_overrides(tmp_path, tiny_model_dir, prefect_harness):
    """The study's overrides (its data, its groups folder) are what its shared steps build and check, not the profile's."""
    arms = {"greedy": ARMS["greedy"]}
    overrides = {"paths": {"groups": "data/groups_study", "validation": "data/validation_study"}, "data": {"max_chars": 700}}
    project = make_project(tmp_path / "p", "tiny", {"study": {"profile": "tiny", "overrides": overrides, "arms": arms}})
    seed_tiny_model(project, tiny_model_dir)
    study(str(project / "params.yaml"), ["greedy"])
    assert (project / "data/groups_study/consistency.jsonl").is_file() and not (project / "data/groups").exists()
    report = json.loads((project / "data/validation_study/report.json").read_text())
    assert report["success"] and report["settings"]["max_chars"] == 700  # validated by the study's data rules
    assert report["groups_dir"].endswith("groups_study")
    record = json.loads((project / "results/consistency/arms/greedy/arm.json").read_text())
    assert record["groups_sha256"] == groups_sha256(project / "data/groups_study")  # the arm ran on the study's groups


def test_register_inside_a_dvc_experiment_judges_gates_but_registers_nothing(tmp_path, tiny_model_dir, monkeypatch):
    project = registry_project(tmp_path / "p", tiny_model_dir)
    params = load_params(project / "params.yaml")
    write_adapter(project, seed=1)
    write_metrics(project, good_metrics())
    monkeypatch.setenv("DVC_EXP_NAME", "arm-1")
    result = steps.register(params)
    assert result.metrics["passed"] is True and result.metrics["registered"] is False
    assert "DVC experiment 'arm-1'" in result.metrics["reasons"][0]
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert client.search_registered_models() == []
    monkeypatch.setenv("DVC_EXP_NAME", "arm-2")
    opted_in = load_params(project / "params.yaml").model_copy(
        update={"registry": params.registry.model_copy(update={"register_experiments": True})}
    )
    assert steps.register(opted_in).metrics["version"] == "1"


GAPO_ARMS = {
    "grpo-validity": {"description": "per-sample validity", "overrides": {
        "train": {"tasks": ["diversity"], "domains": ["list-*", "count-*"]}, "reward": {"weights": {"entropy_helpfulness": 0.0, "stability": 0.0, "validity": 1.0}}}},
    "gapo": {"description": "frequency-aware", "overrides": {
        "train": {"tasks": ["diversity"], "domains": ["list-*", "count-*"]}, "reward": {"weights": {"entropy_helpfulness": 0.0, "stability": 0.0, "frequency_aware": 1.0}}}},
}  # fmt: skip


def test_a_named_diversity_study_trains_on_its_families_and_reports_per_family(tmp_path, tiny_model_dir, prefect_harness):
    """`groupwise study --study gapo` on the generated tasks: each arm trains on list/count tasks only,
    is evaluated on every held-out family, and results/gapo/report.md pairs it with the base and head to head."""
    from components.data import load_groups
    from components.grpo.checkpoint import read_state

    tiny = yaml.safe_load((ROOT / "params.yaml").read_text())["profiles"]["tiny"]
    tiny_gapo = {**tiny, "paths": {"templates": "data/templates_gapo", "groups": "data/groups_gapo", "validation": "data/validation_gapo"},
                 "train": {**tiny["train"], "steps": 1}, "eval": {**tiny["eval"], "max_diversity_tasks": 1000, "max_consistency_groups": 2}}  # fmt: skip
    study_cfg = {"profile": "tiny-gapo", "report": "diversity", "compare": [["gapo", "grpo-validity"]], "arms": GAPO_ARMS}
    project = make_project(tmp_path / "p", "tiny", {"studies": {"gapo": study_cfg}, "profiles.tiny-gapo": tiny_gapo})
    raw = (project / "params.yaml").read_text()
    seed_tiny_model(project, tiny_model_dir)
    study(str(project / "params.yaml"), None, "gapo")

    results = project / "results"
    heldout = {g.domain.split("-")[0] for g in load_groups(project / "data/groups_gapo") if g.split == "heldout" and g.task == "diversity"}
    assert heldout == {"list", "count", "arith"}
    for arm in GAPO_ARMS:
        tasks = pd.read_csv(results / "gapo/arms" / arm / "per_group_diversity.csv")
        assert {d.split("-")[0] for d in tasks["domain"]} == heldout  # every held-out family, the capability check included
        state = read_state(project / "data/study-gapo" / arm / "checkpoints/latest")
        assert state["steps"] == 1
    log = pd.read_csv(results / "gapo/arms/gapo/train_log.csv")
    assert len(log) == 1
    table = pd.read_csv(results / "gapo/table.csv")
    assert set(table["comparison"]) == {"vs base", "head to head"}
    assert set(table[table["family"] == "arith"]["metric"]) == {"validity", "coverage"}
    assert set(table[table["family"] == "list"]["metric"]) == {"all_valid", "coverage", "validity", "js_to_uniform"}
    report = (results / "gapo/report.md").read_text()
    assert "## list selection" in report and "## arithmetic" in report and "| gapo vs grpo-validity |" in report
    assert f"| gapo | list-*, count-* | {machine_label(machine_record())} | frequency-aware |" in report  # the machine it ran on
    assert "Arms ran on different machines" not in report  # both arms ran here
    assert not (results / "consistency/report.md").exists()  # the consistency study's report is not touched
    params = load_params(project / "params.yaml")
    client = MlflowClient(tracking_uri=params.tracking.uri)
    (parent,) = client.search_runs([client.get_experiment_by_name(params.tracking.experiment).experiment_id],
                                   filter_string="tags.`groupwise.study` = 'gapo'")  # fmt: skip
    logged = {f.path for f in client.list_artifacts(parent.info.run_id, "study")}
    assert logged == {"study/report.md", "study/table.csv", "study/plot.png"}  # the report on the study's run

    stamp = (results / "gapo/arms/gapo/arm.json").stat().st_mtime_ns
    study(str(project / "params.yaml"), ["gapo"], "gapo")  # finished: skipped
    assert (results / "gapo/arms/gapo/arm.json").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match=r"unknown study 'nope'") as unknown:
        study(str(project / "params.yaml"), None, "nope")
    listed = str(unknown.value).split("known studies", 1)[1]
    for name in ["consistency", *params.studies]:  # every study is offered, so a typo shows the choices
        assert repr(name) in listed
    assert {"consistency", "fairness", "gapo", "seed"} <= {"consistency", *params.studies}
    assert raw == (project / "params.yaml").read_text()
