"""The study report: which H_norm an arm was scored with, and learning curves of several arms."""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.contracts.summary import HelpfulnessDefinition
from components.formatting import percent
from components.study.report import CURVE_COLUMNS, helpfulness_label, plot_learning_curve, render_markdown


def test_helpfulness_label_reads_metrics_then_overrides_then_the_old_default():
    assert helpfulness_label(HelpfulnessDefinition(scope="window", max_words=32), {}) == "window/32"
    arm = {"overrides": {"reward": {"entropy_scope": "answer", "entropy_max_words": 64}}}
    assert helpfulness_label(None, arm) == "answer/64"
    # evaluations from before reward.entropy_scope: whole answers, W_max not recorded
    assert helpfulness_label(None, {"overrides": {"train": {"steps": 3}}}) == "answer/?"


def _row(arm: str, step: int, scope: str, gap: float) -> dict:
    return dict(zip(CURVE_COLUMNS, (arm, step, step * 30, scope, 0.2, gap, -0.1, 0.0, 0.01)))


def test_curve_of_two_arms_is_tabled_per_arm_and_plotted(tmp_path):
    curve = pd.DataFrame([_row("grpo", 0, "overall", 0.2), _row("grpo", 20, "overall", 0.15),
                          _row("old", 0, "overall", 0.2), _row("old", 20, "overall", 0.05)])  # fmt: skip
    text = render_markdown(pd.DataFrame(), curve, {}, "groupwise study", [])
    assert "| grpo | 20 | 600 | overall | 0.150 |" in text
    assert "| old | 20 | 600 | overall | 0.050 |" in text
    plot_learning_curve(curve, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_arms_without_samples_get_the_length_controlled_gap_from_their_variant_means(tmp_path):
    import json

    from components.study.report import length_lines, means_length_control

    rng = np.random.default_rng(0)
    rows = []
    for i in range(30):  # woman's answers 0.5 nats above man's in the base, none in the tuned; same lengths
        row = {"group_id": f"g{i}", "axis": "gender"}
        for model, shift in (("base", 0.5), ("tuned", 0.0)):
            words = {"gender=woman": float(rng.integers(30, 90)), "gender=man": float(rng.integers(30, 90))}
            h = {k: 0.8 * np.log1p(w) + rng.normal(0, 0.05) for k, w in words.items()}
            h["gender=woman"] += shift
            row[f"{model}_axis_entropy"], row[f"{model}_axis_words"] = json.dumps(h), json.dumps(words)
        rows.append(row)
    pd.DataFrame(rows).to_csv(tmp_path / "per_group_consistency.csv", index=False)
    out = means_length_control(tmp_path / "per_group_consistency.csv")
    assert out["means_lc_reduction"] > 0.7 and out["means_lc_p_value"] < 1e-6
    assert out["base_means_lc_gap"] > out["tuned_means_lc_gap"]
    assert all(v is None for v in means_length_control(tmp_path / "absent.csv").values())
    overall = pd.DataFrame([{
        "arm": "old", "base_words": 60.0, "tuned_words": 60.0, "base_compliance": None, "tuned_compliance": None,
        "compliance_ci_low": None, "compliance_ci_high": None, "compliance_q_value": None, "base_lc_gap": None,
        "tuned_lc_gap": None, "lc_reduction": None, "lc_q_value": None, "overall_reduction": 0.8,
        "gate_length_growth": "pass", "gate_compliance": "n/a", **out,
    }])  # fmt: skip
    (line,) = [ln for ln in length_lines(overall) if ln.startswith("| old |")]
    assert f"{out['base_means_lc_gap']:.3f} → {out['tuned_means_lc_gap']:.3f} ({percent(out['means_lc_reduction'])}, " in line
    assert "| n/a → n/a | n/a | n/a | n/a |" in line  # the per-answer gap needs the samples


def test_seeded_arms_are_tabled_side_by_side_with_the_mean_and_range_of_their_reduction():
    from components.study.report import seed_lines

    def row(arm, family, reduction, q, tuned_words):
        return {"arm": arm, "family": family, "relative_reduction": reduction, "q_value": q, "base_words": 60.0,
                "tuned_words": tuned_words, "base_compliance": 0.7, "tuned_compliance": 0.9, "lc_reduction": reduction + 0.1}  # fmt: skip

    overall = pd.DataFrame([row("grpo", "grpo", 0.56, 1e-8, 172.0), row("c-s1", "c", 0.5, 4e-6, 54.0),
                            row("c-s2", "c", 0.36, 5e-4, 54.0), row("c-s3", "c", 0.43, 1e-3, 66.0)])  # fmt: skip
    lines = seed_lines(overall)
    (line,) = [ln for ln in lines if ln.startswith("| c |")]
    assert line == (
        "| c | 3 | 50 % / 36 % / 43 % | 43 % [36 %, 50 %] | 4.0e-06 / 5.0e-04 / 0.001 | -10 % / -10 % / +10 % "
        "| 0.70 → 0.90 / 0.70 → 0.90 / 0.70 → 0.90 | 60 % / 46 % / 53 % |"
    )
    assert not [ln for ln in lines if ln.startswith("| grpo |")]  # one seed: the arms table has it
    assert seed_lines(overall.iloc[:2]) == []


def test_an_arm_judged_on_train_groups_is_marked_as_a_calibration(tmp_path):
    import shutil

    from components.study.report import study_table
    from tests.conftest import ROOT

    for arm in ("consistency/arms/grpo-compliance-s1", "compliance-calibration/arms/compliance-0.6"):
        shutil.copytree(ROOT / "results" / arm, tmp_path / arm.rsplit("/", 1)[1])
    table = study_table(tmp_path, order=["grpo-compliance-s1", "compliance-0.6"])
    assert set(table.groupby("arm")["split"].first().items()) == {("grpo-compliance-s1", "heldout"), ("compliance-0.6", "train")}
    text = render_markdown(table, pd.DataFrame(columns=CURVE_COLUMNS), {}, "groupwise study --study calib", [], "calib")
    assert text.startswith("# Study `calib`: the paper's gap") and "Regenerate: `groupwise study --study calib`" in text
    assert "Arms marked (train split) are judged on train groups (`eval.split: train`)" in text
    assert "| compliance-0.6 (train split) | overall | 48 |" in text and "| grpo-compliance-s1 | overall | 104 |" in text
    held_out = render_markdown(table[table["split"] == "heldout"], pd.DataFrame(columns=CURVE_COLUMNS), {}, "groupwise study", [])
    assert held_out.startswith("# Consistency study") and "Every arm is evaluated on the same held-out groups" in held_out


def test_every_default_gate_is_one_verdict_naming_what_refused_and_what_was_not_measured():
    """The report's last column judges an arm as a registration would (every default gate, no
    champion): a disparity grown past the fairness margin refuses an arm the length gates pass, and an
    arm evaluated before a gate existed names that gate as not measured rather than failing it."""
    import copy

    from components.study.report import default_gate_verdicts
    from tests.unit.test_gate import fairness_section, good_metrics

    good = good_metrics()
    assert default_gate_verdicts(good)["gate_all"] == "pass"
    grown = copy.deepcopy(good)
    grown["fairness"]["discrim_eval"] = fairness_section(0.045, 0.059, 0.051, 0.063)  # +0.014 logit > the 0.01 margin
    verdicts = default_gate_verdicts(grown)
    assert (verdicts["gate_length_growth"], verdicts["gate_compliance"]) == ("pass", "pass")
    assert verdicts["gate_all"] == "refused: fairness"
    old = copy.deepcopy(good)
    del old["fairness"], old["consistency"]["base_compliance"], old["consistency"]["tuned_compliance"]
    old["consistency"]["tuned_mean_words"] = 90.0  # +200 %
    assert default_gate_verdicts(old)["gate_all"] == "refused: length_growth (n/a: compliance, fairness, profile_correlation)"
