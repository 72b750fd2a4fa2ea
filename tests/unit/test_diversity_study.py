"""The GAPO / SEED-GRPO study pieces: domain patterns, the per-family report, the `studies` config."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from components.config import ParamsError, load_params
from components.contracts.groups import Member, PromptGroup
from components.data.selection import in_domains, select_groups
from components.evaluation.statistics import detectable_effect
from components.study.diversity_report import diversity_table, family, write_diversity_report
from components.study.layout import StudyLayout
from components.study.machine import ISA_FLAGS, machine_label, machine_record
from tests.conftest import make_project


def test_domain_patterns_select_names_and_globs():
    assert in_domains("job", None) and in_domains("job", ["job"]) and not in_domains("jobs", ["job"])
    assert in_domains("list-colour-003", ["list-*", "count-*"]) and not in_domains("arith-add-001", ["list-*", "count-*"])
    assert not in_domains("List-colour-003", ["list-*"])  # case-sensitive, like the domains themselves

    def group(domain, task):
        return PromptGroup(group_id=f"{domain}-p0", domain=domain, task=task, split="train",
                           members=[Member(variant_id="p0", text="Pick one of: a, b.")],
                           valid_answers=["a", "b"] if task == "diversity" else None)  # fmt: skip

    groups = [group("list-colour-000", "diversity"), group("arith-add-001", "diversity"), group("count-odd-1-9", "diversity")]
    assert [g.domain for g in select_groups(groups, ["diversity"], ["list-*", "count-*"])] == ["list-colour-000", "count-odd-1-9"]
    assert select_groups(groups, ["consistency"], None) == []


def _tasks(arm_values: dict[str, list[float]], metric="all_valid", fam="list") -> pd.DataFrame:
    rows = []
    for i, (base, tuned) in enumerate(zip(arm_values["base"], arm_values["tuned"])):
        rows.append({"group_id": f"{fam}-x-{i:03d}-p0", "domain": f"{fam}-x-{i:03d}", f"base_{metric}": base, f"tuned_{metric}": tuned})
    frame = pd.DataFrame(rows)
    for m in ("all_valid", "coverage", "validity", "js_to_uniform"):
        for model in ("base", "tuned"):
            if f"{model}_{m}" not in frame:
                frame[f"{model}_{m}"] = 0.5
    return frame.assign(family=frame["domain"].map(family))


def test_the_table_pairs_each_arm_with_the_base_and_arms_head_to_head_by_task():
    base = [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    gapo = _tasks({"base": base, "tuned": [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]})
    grpo = _tasks({"base": base, "tuned": [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]})
    table = diversity_table({"gapo": gapo, "grpo": grpo}, [("gapo", "grpo")])
    row = table[(table["comparison"] == "vs base") & (table["arm"] == "gapo") & (table["metric"] == "all_valid")].iloc[0]
    assert row["n_tasks"] == 6 and row["reference"] == pytest.approx(2 / 6) and row["value"] == pytest.approx(5 / 6)
    assert row["diff"] == pytest.approx(0.5)
    assert row["p_value"] == pytest.approx(stats.ttest_rel(base, [1, 1, 1, 0, 1, 1]).pvalue)
    assert row["ci_low"] <= 0.5 <= row["ci_high"]
    # the paired difference 6 tasks detect at α = 0.01 with 80 % power, from the sd of these differences
    diffs = np.array([1, 1, 0, 0, 0, 1], dtype=float)
    assert row["detectable"] == pytest.approx(detectable_effect(float(diffs.std(ddof=1)), 6, 0.01, 0.8))
    assert row["detectable"] > 0.5  # six tasks cannot resolve this difference at α = 0.01
    h2h = table[(table["comparison"] == "head to head") & (table["metric"] == "all_valid")].iloc[0]
    assert (h2h["arm"], h2h["against"]) == ("gapo", "grpo")
    assert h2h["reference"] == pytest.approx(2 / 6) and h2h["value"] == pytest.approx(5 / 6)  # tuned vs tuned
    # q: Benjamini–Hochberg over every defined p of the report
    defined = table["p_value"].notna()
    expected = stats.false_discovery_control(table.loc[defined, "p_value"].astype(float), method="bh")
    assert np.allclose(table.loc[defined, "q_value"].astype(float), expected)
    assert table.loc[~defined, "q_value"].isna().all()  # constant differences: no test, no q


def test_arithmetic_reports_accuracy_and_pass_at_k(tmp_path):
    frame = _tasks({"base": [0.2, 0.0, 0.5], "tuned": [0.4, 0.2, 0.5]}, metric="validity", fam="arith")
    table = diversity_table({"seed-grpo": frame}, [])
    assert set(table["metric"]) == {"validity", "coverage"}  # no all_valid / JS on one-answer tasks
    arms_dir = tmp_path / "seed" / "arms"
    (arms_dir / "seed-grpo").mkdir(parents=True)
    frame.drop(columns="family").to_csv(arms_dir / "seed-grpo" / "per_group_diversity.csv", index=False)
    (arms_dir / "seed-grpo" / "arm.json").write_text(json.dumps({"overrides": {"train": {"domains": ["arith-*"]}}}))
    arms = {"grpo-correctness": {"description": "not run yet"}, "seed-grpo": {"description": "SEED"}}
    path = write_diversity_report(
        "seed", StudyLayout(tmp_path / "seed"), arms, [("seed-grpo", "grpo-correctness")], "groupwise study --study seed"
    )
    text = path.read_text()
    assert "## arithmetic" in text and "accuracy (share of samples right)" in text
    assert "| seed-grpo | arith-* | not recorded | SEED |" in text and "| grpo-correctness | n/a | n/a | not run yet |" in text
    assert "| seed-grpo vs base | accuracy (share of samples right) | 3 | 0.233 | 0.367 | +0.133" in text
    assert (tmp_path / "seed" / "plot.png").stat().st_size > 1000
    assert len(pd.read_csv(tmp_path / "seed" / "table.csv")) == 2


AMX = {"cpu": "Xeon", "isa": ["avx512f", "amx_bf16", "amx_tile"], "gpu": None}
AVX512 = {"cpu": "Xeon", "isa": ["avx512f", "avx512_bf16"], "gpu": None}


@pytest.mark.parametrize(("machines", "warned"), [((AMX, AMX), False), ((AMX, AVX512), True)])
def test_the_report_names_each_arms_machine_and_warns_when_they_differ(tmp_path, machines, warned):
    arms_dir = tmp_path / "gapo" / "arms"
    for arm, machine in zip(("grpo-validity", "gapo"), machines):
        (arms_dir / arm).mkdir(parents=True)
        _tasks({"base": [0.2, 0.4], "tuned": [0.5, 0.6]}).drop(columns="family").to_csv(
            arms_dir / arm / "per_group_diversity.csv", index=False
        )
        (arms_dir / arm / "arm.json").write_text(json.dumps({"overrides": {}, "machine": machine}))
    arms = {"grpo-validity": {"description": "GRPO"}, "gapo": {"description": "GAPO"}}
    text = write_diversity_report("gapo", StudyLayout(tmp_path / "gapo"), arms, [("gapo", "grpo-validity")], "cmd").read_text()
    assert "| grpo-validity | all training tasks | CPU, AMX | GRPO |" in text
    assert ("**Arms ran on different machines** (CPU, AMX, CPU, AVX512)" in text) is warned


def test_a_machine_record_names_the_kernel_isa_of_this_machine():
    record = machine_record()
    assert record["torch"] == torch.__version__ and set(record["isa"]) <= set(ISA_FLAGS)
    assert machine_label(record) in {"CPU", "CPU, AVX512", "CPU, AMX"} or record["gpu"]
    assert machine_label({"gpu": "NVIDIA H100 80GB HBM3"}) == "NVIDIA H100 80GB HBM3" and machine_label(None) == "not recorded"


def test_studies_are_named_and_their_compare_pairs_are_arms(tmp_path):
    project = make_project(tmp_path / "p", "tiny", {"studies": {"consistency": {"arms": {}}}})
    with pytest.raises(ParamsError, match="studies: 'consistency' is not a study name"):
        load_params(project / "params.yaml")
    project = make_project(tmp_path / "q", "tiny", {"studies": {"x": {"arms": {"a": {}}, "compare": [["a", "b"]]}}})
    with pytest.raises(ParamsError, match=r"compare: \['b'\] not arms of this study"):
        load_params(project / "params.yaml")
    params = load_params(make_project(tmp_path / "r", "tiny") / "params.yaml", "gapo")
    assert params.paths.templates.name == "templates_gapo" and params.train.tasks == ["diversity"]
    assert {"gapo", "seed"} <= set(params.studies) and params.studies["gapo"].report == "diversity"
