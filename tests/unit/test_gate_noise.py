"""The gates' own noise (`components.release.gate_noise`) and the gate-noise study that measures it."""

from __future__ import annotations

import copy
import json
import math

import pandas as pd
import pytest

from tests.conftest import ROOT

A_A = ROOT / "results/consistency/arms/base-reseeded"  # a committed A/A evaluation (held out): the summaries' shape


def _summary(coverage: tuple[float, float], validity: tuple[float, float] = (0.6, 0.6)) -> dict:
    metrics = copy.deepcopy(json.loads((A_A / "metrics.json").read_text()))
    d = metrics["diversity"]
    (d["base_coverage"], d["tuned_coverage"]), (d["base_validity"], d["tuned_validity"]) = coverage, validity
    return metrics


def test_the_noise_level_is_z95_times_the_rms_of_the_gates_a_a_values_and_a_threshold_below_it_is_raised():
    from components.config import GateConfig
    from components.release.gate_noise import Z_95, gate_noise

    drops = [0.08, -0.02, 0.03, -0.06]  # base − candidate coverage of four A/A evaluations
    summaries = [_summary((0.3, 0.3 - w)) for w in drops]
    noise = {g.gate: g for g in gate_noise(summaries, GateConfig(max_coverage_drop=0.05))}
    assert {"coverage", "validity", "diversity_helpfulness", "diversity_length", "diversity_empty_rate"} <= set(noise)
    assert "helpfulness" not in noise and "compliance" not in noise  # the consistency section is not judged here
    cov = noise["coverage"]
    assert cov.values == pytest.approx(drops)
    rms = math.sqrt(sum(w * w for w in drops) / 4)
    assert cov.level == pytest.approx(Z_95 * rms)  # 1.645 × 0.0539 = 0.0887
    assert (cov.threshold, cov.refused) == (0.05, 1)  # only the 0.08 drop is above the default
    assert cov.suggested == 0.09  # the level rounded up to 0.01
    assert noise["validity"].level == 0 and noise["validity"].suggested == noise["validity"].threshold  # no noise: unchanged
    assert noise["coverage"].row()["max"] == pytest.approx(0.08)


def test_a_threshold_above_its_noise_stays_and_a_gate_that_measured_nothing_is_left_out():
    from components.config import GateConfig
    from components.release.gate_noise import gate_noise

    noise = {g.gate: g for g in gate_noise([_summary((0.3, 0.29)), _summary((0.3, 0.31))], GateConfig(max_coverage_drop=0.2))}
    assert noise["coverage"].suggested == 0.2 and noise["coverage"].refused == 0
    no_tasks = _summary((0.3, 0.3))
    no_tasks["diversity"] = {k: (0 if k == "n_tasks" else None) for k in no_tasks["diversity"]}
    assert gate_noise([no_tasks], GateConfig()) == []  # every diversity gate passes with a note: no value, no noise
    with pytest.raises(ValueError, match="no A/A evaluation"):
        gate_noise([], GateConfig())


def test_the_report_lists_each_gate_with_its_refusals_and_each_arms_value(tmp_path):
    from components.study.gate_noise_report import write_gate_noise_report
    from components.study.layout import StudyLayout

    layout = StudyLayout(tmp_path / "results/gate-noise")
    for arm, drop in (("aa-s1", 0.07), ("aa-s2", 0.01)):
        folder = layout.arms / arm
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(_summary((0.3, 0.3 - drop))))
        (folder / "arm.json").write_text(json.dumps({"name": arm}))
    (layout.arms / "aa-s3").mkdir()  # unfinished: no arm.json
    from components.config import GateConfig

    gate = GateConfig(max_coverage_drop=0.05)
    page = write_gate_noise_report(
        "gate-noise", layout, ["aa-s1", "aa-s2", "aa-s3"], "groupwise study --study gate-noise", gate
    ).read_text()
    assert "2 of 3 A/A evaluations finished" in page
    (row,) = [line for line in page.splitlines() if line.startswith("| coverage |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == ["max_coverage_drop = 0.05", "2", "1"] and cells[5] == "+0.070"
    table = pd.read_csv(layout.table)
    coverage = table[table.gate == "coverage"].set_index("arm")
    assert coverage["value"].to_dict() == pytest.approx({"aa-s1": 0.07, "aa-s2": 0.01})
    assert coverage["passed"].to_dict() == {"aa-s1": False, "aa-s2": True}


def test_the_gate_noise_study_is_ten_independent_a_a_draws_on_the_train_split():
    from components.study.domain import arm_params, load_study

    params, study = load_study(ROOT / "params.yaml", "gate-noise")
    assert study.config.report == "gate_noise" and len(study.config.arms) == 10
    seeds = set()
    for name, arm in study.config.arms.items():
        p = arm_params(params, study, name)
        assert arm.kind == "decoding" and p.eval.split == "train"  # held-out data never sets a gate
        assert (p.eval.candidate.source, p.eval.candidate.seed_offset) == ("base", 1)
        assert (p.eval.max_diversity_tasks, p.eval.samples_per_prompt, p.eval.temperature) == (8, 6, 0.7)  # the judging design
        seeds |= {p.seed, p.seed + 1}
    assert len(seeds) == 20  # no draw shared between two evaluations


def test_no_shipped_diversity_threshold_refuses_the_unchanged_model_more_than_one_time_in_twenty():
    """The committed A/A evaluations (results/gate-noise) against the shipped defaults: a threshold that
    only the diversity section uses is at or above its measured 95 % noise level (a lowered default fails
    here), and greedy decoding's held-out coverage collapse is still refused."""
    from components.config import GateConfig, load_params
    from components.release.gate import GATES, judge
    from components.release.gate_noise import gate_noise
    from components.study.gate_noise_report import finished_summaries

    arms = ROOT / "results/gate-noise/arms"
    summaries = finished_summaries(arms, sorted(p.name for p in arms.iterdir()))
    assert len(summaries) == 10
    shipped = load_params(ROOT / "params.yaml").gate
    assert shipped.max_coverage_drop == GateConfig().max_coverage_drop and shipped.max_validity_drop == GateConfig().max_validity_drop
    noise = {g.threshold_field: g for g in gate_noise(summaries.values(), shipped)}
    for field in ("max_coverage_drop", "max_validity_drop"):
        assert noise[field].threshold >= noise[field].level, (field, noise[field].row())
    greedy = json.loads((ROOT / "results/consistency/arms/greedy/metrics.json").read_text())
    assert not judge(GATES["coverage"], greedy, shipped).passed  # 0.264 -> 0.092: a real loss of diversity
