"""The fairness study's report from arm folders (no model): reductions, removal of a start arm's
disparity with its paired test, seeds summarised per family, the targets, the page and the plot."""

import json

import pandas as pd
import pytest

from components.study.fairness_report import fairness_table, family_summary, target_rows, write_fairness_report
from components.study.layout import StudyLayout


def write_arm(arms_dir, name, female, nb, *, seed=None, rho=0.95, kind="train", base=(0.04, 0.04)):
    folder = arms_dir / name
    folder.mkdir(parents=True)
    record = {"name": name, "kind": kind, "overrides": {"seed": seed} if seed else {}, "train_seconds": 300.0}
    (folder / "arm.json").write_text(json.dumps(record))
    scores = {
        key: {"base_score": b, "tuned_score": t, "tuned_ci_low": t - 0.01, "tuned_ci_high": t + 0.01, "delta_p_value": 1e-4, "delta_q_value": 2e-4}
        for key, b, t in (("gender_female", base[0], female), ("gender_non_binary", base[1], nb))
    }  # fmt: skip
    summary = {"gated": ["gender_female", "gender_non_binary"], "scores": scores, "n_questions": 20, "profile_correlation": rho,
               "base_yes_share": 0.9, "tuned_yes_share": 0.8, "tuned_mean_logit": 1.0}  # fmt: skip
    (folder / "metrics.json").write_text(
        json.dumps({"fairness": {"discrim_eval": summary}, "consistency": {"base_mean_gap": 0.2, "tuned_mean_gap": 0.19}})
    )
    effects = [{"benchmark": "discrim_eval", "question_id": q, "demographic": key, "base_effect": 0.04, "tuned_effect": value * (1 + 0.1 * ((7 * q) % 5 - 2))}
               for q in range(10) for key, value in (("gender_female", female), ("gender_non_binary", nb))]  # fmt: skip
    pd.DataFrame(effects).to_csv(folder / "fairness_effects.csv", index=False)


ARMS = {
    "prompt-intervention": {"kind": "decoding", "description": "prompt"},
    "decision-parity-s1": {"family": "decision-parity", "description": "dp"},
    "decision-parity-s2": {"family": "decision-parity", "description": "dp"},
    "planted-bias-s1": {
        "family": "planted-bias",
        "description": "plant",
        "overrides": {"reward": {"planted_bias": {"axis": "gender", "favoured": "male", "disfavoured": "female"}}},
    },
    "planted-to-parity-s1": {"family": "planted-to-parity", "start_from": "planted-bias-s1", "description": "removal"},
    "never-run": {"description": "listed"},
}


@pytest.fixture
def arms_dir(tmp_path):
    arms = tmp_path / "results" / "fairness" / "arms"
    write_arm(arms, "prompt-intervention", 0.03, 0.035, kind="decoding")
    write_arm(arms, "decision-parity-s1", 0.01, 0.016, seed=1)
    write_arm(arms, "decision-parity-s2", 0.02, 0.012, seed=2, rho=0.85)
    write_arm(arms, "planted-bias-s1", -0.4, -0.1, seed=1)  # planted: female 10x the base; non-binary (not planted) 2.5x
    write_arm(arms, "planted-to-parity-s1", -0.04, -0.02, seed=1)
    return arms


def test_rows_reductions_and_removal(arms_dir):
    table = fairness_table(arms_dir, ARMS)
    assert list(dict.fromkeys(table["arm"])) == [a for a in ARMS if a != "never-run"]  # unfinished arms have no rows
    female = table[table["demographic"] == "gender_female"].set_index("arm")
    assert female.loc["decision-parity-s1", "reduction"] == pytest.approx(0.75)
    assert female.loc["planted-bias-s1", "reduction"] == pytest.approx(1 - 10.0)  # the plant: 10x the base disparity
    assert female.loc["planted-to-parity-s1", "start_score"] == pytest.approx(-0.4)
    assert female.loc["planted-to-parity-s1", "removal"] == pytest.approx(0.9)
    assert female.loc["planted-to-parity-s1", "removal_q"] < 0.01  # |effects| 0.40.. vs 0.04.., paired over 10 questions
    assert pd.isna(female.loc["decision-parity-s1", "removal"])
    summary = family_summary(table).set_index(["family", "demographic"])
    row = summary.loc[("decision-parity", "gender_female")]
    assert row["seeds"] == 2 and row["reduction"] == pytest.approx(0.625) and row["reduction_min"] == pytest.approx(0.5)


def test_targets_say_what_was_met_and_missed(arms_dir):
    targets = {t.what: t.verdict for t in target_rows(fairness_table(arms_dir, ARMS))}
    assert targets["decision-parity: each abs. score −50 %, q < 0.01, every seed"] == "met"  # min reduction 50 % (female, s2)
    assert targets["decision-parity reduces more than prompt-intervention"] == "met"
    assert targets["decision-parity: profile correlation ≥ 0.8"] == "met"
    # the plant's targets judge the planted demographic only (female against male): 10x, removed 90 %
    assert targets["planted-bias: held-out abs. score ≥ 5× the base's, every seed"] == "met"
    assert targets["planted-to-parity removes ≥ 80 % of the plant, every seed"] == "met"
    table = fairness_table(arms_dir, ARMS)
    assert table.loc[table["arm"].str.startswith("planted"), ["demographic", "planted"]].values.tolist() == [
        ["gender_female", True],
        ["gender_non_binary", False],
        ["gender_female", True],
        ["gender_non_binary", False],
    ]
    weak = {**ARMS, "planted-bias-s1": {**ARMS["planted-bias-s1"], "overrides": {"reward": {"planted_bias": {
        "axis": "gender", "favoured": "male", "disfavoured": "non_binary"}}}}}  # fmt: skip
    targets = {t.what: t.verdict for t in target_rows(fairness_table(arms_dir, weak))}
    assert targets["planted-bias: held-out abs. score ≥ 5× the base's, every seed"] == "missed"  # non-binary: 2.5x only
    assert target_rows(fairness_table(arms_dir, {"x": {}}))[0].verdict == "not run"  # nothing run: not judged


def test_a_recipe_variant_is_judged_by_the_same_targets_on_its_own(arms_dir):
    write_arm(arms_dir, "decision-parity-long-s1", 0.03, 0.002, seed=1)  # female only 25 % down
    arms = {**ARMS, "decision-parity-long-s1": {"family": "decision-parity-long", "judged_as": "decision-parity"},
            "unjudged-s1": {"family": "unjudged", "judged_as": None}}  # fmt: skip
    targets = {t.what: (t.measured, t.verdict) for t in target_rows(fairness_table(arms_dir, arms), arms=arms)}
    assert targets["decision-parity: each abs. score −50 %, q < 0.01, every seed"][1] == "met"  # its own seeds only
    assert targets["decision-parity-long: each abs. score −50 %, q < 0.01, every seed"] == ("min reduction 25 %, max q 2.0e-04", "missed")
    assert targets["decision-parity-long: profile correlation ≥ 0.8"][1] == "met"
    assert not any(what.startswith("unjudged") for what in targets)
    arms["decision-parity-never-s1"] = {"family": "decision-parity-never", "judged_as": "decision-parity"}
    targets = {t.what: t.verdict for t in target_rows(fairness_table(arms_dir, arms), arms=arms)}
    assert targets["decision-parity-never: each abs. score −50 %, q < 0.01, every seed"] == "not run"  # not judged


def test_a_second_plant_and_its_removal_are_judged_by_the_plants_targets_on_their_own(arms_dir):
    plant = ARMS["planted-bias-s1"]["overrides"]
    write_arm(arms_dir, "planted-sized-s1", -0.16, 0.04, seed=1)  # 4x the base: below the 5x bar
    write_arm(arms_dir, "planted-sized-to-parity-s1", -0.02, 0.04, seed=1)  # 87.5 % of −0.16 removed
    arms = {**ARMS, "planted-sized-s1": {"family": "planted-sized", "judged_as": "planted-bias", "overrides": plant},
            "planted-sized-to-parity-s1": {"family": "planted-sized-to-parity", "judged_as": "planted-to-parity",
                                           "start_from": "planted-sized-s1"}}  # fmt: skip
    targets = {t.what: (t.measured, t.verdict) for t in target_rows(fairness_table(arms_dir, arms), arms=arms)}
    assert targets["planted-bias: held-out abs. score ≥ 5× the base's, every seed"] == ("min 10.0×", "met")  # the first plant's own
    assert targets["planted-sized: held-out abs. score ≥ 5× the base's, every seed"] == ("min 4.0×", "missed")
    assert targets["planted-sized-to-parity removes ≥ 80 % of the plant, every seed"] == ("min 88 %", "met")
    assert targets["planted-to-parity removes ≥ 80 % of the plant, every seed"] == ("min 90 %", "met")
    arms["planted-sized-to-parity-s2"] = {"family": "planted-sized-to-parity", "judged_as": "planted-to-parity"}  # listed, not run
    targets = {t.what: (t.measured, t.verdict) for t in target_rows(fairness_table(arms_dir, arms), arms=arms)}
    assert targets["planted-sized-to-parity removes ≥ 80 % of the plant, every seed"] == ("1 of 2 seeds run: min 88 %", "incomplete")


def test_a_target_over_every_seed_is_not_called_met_before_every_seed_has_run(arms_dir, tmp_path):
    arms = {**ARMS, "planted-to-parity-s2": {"family": "planted-to-parity", "start_from": "planted-bias-s1"}}
    page = write_fairness_report("fairness", StudyLayout(tmp_path / "results" / "fairness"), arms, "cmd").read_text()
    assert "| planted-to-parity removes ≥ 80 % of the plant, every seed | 1 of 2 seeds run: min 90 % | incomplete |" in page
    assert "| planted-bias: held-out abs. score ≥ 5× the base's, every seed | min 10.0× | met |" in page


def test_report_files(arms_dir, tmp_path):
    layout = StudyLayout(tmp_path / "results" / "fairness")
    layout.notes_file.write_text("- a finding outside the table\n")
    page = write_fairness_report("fairness", layout, ARMS, "groupwise study --study fairness").read_text()
    assert "| decision-parity | gender_female | 2 |" in page and "| never-run | None | not run yet | listed |" in page
    assert "| met |" in page and "- a finding outside the table" in page
    assert layout.plot.stat().st_size > 1000
    assert len(pd.read_csv(layout.table)) == 10
