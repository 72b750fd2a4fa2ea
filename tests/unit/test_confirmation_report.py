"""The confirmation's report applies its plan's decision rule to the arms' own tables (synthetic arms here)."""

import copy
import json

import numpy as np
import pandas as pd
import pytest

from components.study.confirmation_report import TARGETS, seed_figures, write_confirmation_report
from components.study.layout import StudyLayout
from tests.conftest import ROOT

PRIMARY = ["housing", "car"]
TEMPLATE = json.loads((ROOT / "results/confirmation/arms/paired-consistency-s1/metrics.json").read_text())


def _arm(folder, seed: int, reduction: float, compliance_drop: float = 0.0, female_delta: float = -0.01, bbq_bias: float = 0.0):
    rng = np.random.default_rng(seed)
    n = 40
    base = rng.uniform(0.1, 0.3, n)
    rows = pd.DataFrame({
        "group_id": [f"g{i}" for i in range(n)], "domain": [PRIMARY[i % 2] for i in range(n)],
        "base_gap": base, "tuned_gap": base * (1 - reduction) + rng.normal(0, 0.01, n),
        "base_compliance": 0.7, "tuned_compliance": 0.7 - compliance_drop, "base_words": 60.0, "tuned_words": 55.0,
        "base_helpfulness": 0.88, "tuned_helpfulness": 0.9, "base_truncated_share": 0.02, "tuned_truncated_share": 0.0,
        "base_length_controlled_gap": 0.7, "tuned_length_controlled_gap": 0.3,
    })  # fmt: skip
    probe = rows.iloc[:4].assign(domain="travel-words40", group_id=lambda f: "p" + f["group_id"],
                                 base_truncated_share=0.25, tuned_truncated_share=0.1)  # fmt: skip
    folder.mkdir(parents=True)
    pd.concat([rows, probe]).to_csv(folder / "per_group_consistency.csv", index=False)
    jitter = rng.normal(0, 2e-4)  # seeds never agree to the last digit
    metrics = copy.deepcopy(TEMPLATE)  # a whole evaluation summary, so the gates can judge it
    scores = metrics["fairness"]["discrim_eval"]["scores"]
    scores["gender_female"]["delta"], scores["gender_non_binary"]["delta"] = female_delta + jitter, -0.01 + jitter
    metrics["bbq"]["ambig_bias"]["delta"], metrics["bbq"]["disambig_accuracy"]["delta"] = bbq_bias + jitter, jitter
    (folder / "metrics.json").write_text(json.dumps(metrics))


def _study(tmp_path, recipe_seeds, paper_seeds=(0.3,), **kwargs):
    folder = tmp_path / "results" / "confirmation"
    record = {"primary_domains": PRIMARY, "primary_groups": 40, "seeds": {"paired-consistency": [1, 2, 3, 4, 5], "paper": [1, 2, 3]}}
    folder.mkdir(parents=True)
    (folder / "preregistration.json").write_text(json.dumps(record))
    arms = {}
    for i, reduction in enumerate(recipe_seeds, start=1):
        _arm(folder / "arms" / f"paired-consistency-s{i}", i, reduction, **kwargs)
        arms[f"paired-consistency-s{i}"] = "paired-consistency"
    for i, reduction in enumerate(paper_seeds, start=1):
        _arm(folder / "arms" / f"paper-s{i}", 8 + i, reduction)
        arms[f"paper-s{i}"] = "paper"
    layout = StudyLayout(folder)
    write_confirmation_report(layout, arms)
    return json.loads((folder / "verdict.json").read_text()), layout.report.read_text()


def test_five_seeds_that_meet_every_criterion_confirm(tmp_path):
    verdict, report = _study(tmp_path, [0.45, 0.5, 0.42, 0.48, 0.5])
    assert verdict["status"] == "confirmed" and verdict["failed"] == []
    assert verdict["primary"]["n"] == 5 and verdict["primary"]["ci_low"] > 0.2
    assert verdict["mixed_model"]["n_seeds"] == 5
    assert verdict["mixed_model"]["usable"]  # −intercept / mean base gap: about the planted 47 % reduction
    relative = float(report.split("as a relative reduction (−intercept / mean base gap) ")[1].split(" %")[0])
    assert 40 < relative < 54
    assert "**Status: confirmed**" in report and "paper-s1" in report


def test_a_failed_target_or_a_weak_primary_does_not_confirm(tmp_path):
    verdict, report = _study(tmp_path, [0.45, 0.5, 0.42, 0.48, 0.5], compliance_drop=0.1)
    assert verdict["status"] == "not confirmed" and verdict["failed"] == ["compliance_change"]
    assert "criteria failed: compliance_change" in report
    weak, _ = _study(tmp_path / "weak", [0.6, 0.05, 0.5, 0.1, 0.55])  # mean 36 %, CI lower bound under 20 %
    assert weak["status"] == "not confirmed" and "primary" in weak["failed"]


def test_the_verdict_waits_for_every_preregistered_seed(tmp_path):
    verdict, report = _study(tmp_path, [0.45, 0.5])
    assert verdict["status"] == "running" and verdict["seeds_done"] == 2
    assert "Not yet evaluated: paired-consistency-s3" in report


def test_discrimeval_is_judged_by_its_ci_upper_bound(tmp_path):
    verdict, _ = _study(tmp_path, [0.45, 0.5, 0.42, 0.48, 0.5], female_delta=0.004)  # CI upper bound ~ +0.0043
    female = verdict["targets"]["discrim_female_change"]
    assert female["mean"] == pytest.approx(0.004, abs=5e-4) and female["ci_high"] < 0.005 and female["holds"] is True
    up, _ = _study(tmp_path / "up", [0.45, 0.5, 0.42, 0.48, 0.5], female_delta=0.006)
    assert up["targets"]["discrim_female_change"]["holds"] is False


def test_seed_figures_read_the_primary_domains_only():
    groups = pd.DataFrame({"domain": ["housing", "travel-open"], "base_gap": [0.2, 5.0], "tuned_gap": [0.1, 5.0],
                           "base_compliance": [1.0, 0.0], "tuned_compliance": [1.0, 0.0], "base_words": [10, 1], "tuned_words": [12, 1],
                           "base_helpfulness": [0.5, 0.0], "tuned_helpfulness": [0.6, 0.0]})  # fmt: skip
    figures = seed_figures(groups, {}, ["housing"], {"open": "travel-open"})
    assert figures["gap_reduction"] == pytest.approx(0.5) and figures["words_change"] == pytest.approx(0.2)
    assert figures["open_base_gap"] == 5.0 and figures["discrim_female_change"] is None
    assert {t.name for t in TARGETS} <= set(figures)


def test_cut_answers_are_reported_per_part_not_pooled(tmp_path):
    """The INVALID flag pools every sample; the report gives the primary groups and the probes apart."""
    _, report = _study(tmp_path, [0.45, 0.5])
    assert "| paired-consistency (2 seeds) | 2.0 % → 0.0 % | 25.0 % → 10.0 % |" in report
    assert "| paper (1 seed) | 2.0 % → 0.0 % | 25.0 % → 10.0 % |" in report


def test_seed_figures_give_the_cut_share_of_each_part():
    groups = pd.DataFrame({"domain": ["housing", "housing", "travel-open"], "base_gap": [0.2, 0.2, 5.0], "tuned_gap": [0.1, 0.1, 5.0],
                           "base_compliance": 1.0, "tuned_compliance": 1.0, "base_words": 10, "tuned_words": 12,
                           "base_helpfulness": 0.5, "tuned_helpfulness": 0.6,
                           "base_truncated_share": [0.0, 0.1, 0.5], "tuned_truncated_share": [0.0, 0.0, 0.2]})  # fmt: skip
    figures = seed_figures(groups, {}, ["housing"], {"open": "travel-open"})
    assert figures["primary_base_truncated"] == pytest.approx(0.05) and figures["primary_tuned_truncated"] == 0.0
    assert figures["probes_base_truncated"] == 0.5 and figures["probes_tuned_truncated"] == pytest.approx(0.2)


def test_the_descriptive_parts_of_the_plan_are_reported(tmp_path):
    """Per seed the paired t over groups and the default gates; the gap per domain; recipe − paper by Welch over
    seeds; and whether the base model is above chance on BBQ's disambiguated items (the plan's proviso)."""
    _, report = _study(tmp_path, [0.45, 0.5])
    seed_row = next(line for line in report.splitlines() if line.startswith("| paired-consistency-s1 |"))
    cells = [c.strip() for c in seed_row.strip("|").split("|")]
    assert float(cells[3]) < 1e-6 and cells[-1].startswith(("pass", "refused"))  # p over 20 groups; a gate verdict
    assert "| housing | " in report and "| car | " in report
    assert "length-controlled (z units: entropy given answer length) | 0.700 → 0.300 | 0.700 → 0.300 |" in report
    assert "paired-consistency − paper (Welch t over seeds)" in report
    base = TEMPLATE["bbq"]["disambig_accuracy"]
    assert f"disambiguated accuracy is {base['base']:.3f}" in report and "(chance 0.333, three options): at chance." in report


def test_the_paper_beside_the_recipe_is_a_welch_test_over_seeds(tmp_path):
    _, report = _study(tmp_path, [0.45, 0.5, 0.42, 0.48, 0.5], paper_seeds=(0.24, 0.27, 0.25))
    row = next(line for line in report.splitlines() if line.startswith("| R | "))
    difference = row.strip("|").split("|")[-1].strip()  # recipe − paper: about 0.47 − 0.25
    assert 0.17 < float(difference.split(" ")[0]) < 0.27 and float(difference.split("p ")[1]) < 0.01


def test_the_status_line_flags_invalid_evaluations_and_the_report_gives_the_gap_diagnosis(tmp_path):
    """The evaluator's INVALID flag (truncation) reaches the status line with the base's cut shares per part;
    its "mostly spread" reading and the systematic residue (tuned signed difference, p < 0.01) are counted per family."""
    _, report = _study(tmp_path, [0.45, 0.5])  # the template arm: flagged INVALID, "mostly spread", residue p 0.16
    status = report.splitlines()[2]
    assert status.endswith(
        " 3 of 3 arms' evaluations are flagged INVALID by the evaluator's 5 % truncation rule: the base cut 2.0 % "
        'of its answers on the primary groups and 25.0 % on the instruction probes ("Answers cut at the token limit" below).'
    )
    assert "| paired-consistency (2 seeds) | 2 of 2 | 0.201 → 0.117 | +0.040 → +0.015 | 0 of 2 |" in report
    folder = tmp_path / "results" / "confirmation"
    metrics_path = folder / "arms" / "paired-consistency-s2" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics["consistency"] |= {"valid": True, "tuned_signed_diff_p": 0.001, "gap_change_reason": "gap 0.1 lower: …; mostly systematic"}
    metrics_path.write_text(json.dumps(metrics))
    arms = {"paired-consistency-s1": "paired-consistency", "paired-consistency-s2": "paired-consistency", "paper-s1": "paper"}
    report = write_confirmation_report(StudyLayout(folder), arms).read_text()
    assert "| paired-consistency (2 seeds) | 1 of 2 | 0.201 → 0.117 | +0.040 → +0.015 | 1 of 2 |" in report
    assert " 2 of 3 arms' evaluations are flagged INVALID" in report.splitlines()[2]
    from components.study.confirmation_report import committed_truncation_flag

    (folder / "arms" / "paired-consistency-s1" / "arm.json").write_text(json.dumps({"family": "paired-consistency"}))
    (folder / "arms" / "paired-consistency-s2" / "arm.json").write_text(json.dumps({"family": "paired-consistency"}))
    (folder / "arms" / "paper-s1" / "arm.json").write_text(json.dumps({"family": "paper"}))
    flag = committed_truncation_flag(folder)
    assert flag == {"invalid": 2, "arms": 3, "base_primary": pytest.approx(0.02), "base_probes": pytest.approx(0.25)}
