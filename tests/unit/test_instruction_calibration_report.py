"""The instruction calibration's rule (results/instruction-calibration/plan.md) judged on an arm's metrics.json:
a committed confirmation arm's whole evaluation summary, given an `instructions` section and edited per case."""

import copy
import json

import pandas as pd
import pytest

from components.contracts.summary import EvaluationSummary
from components.study.instruction_calibration_report import CRITERIA, FOLLOWING, add_rule, judge
from components.study.layout import StudyLayout
from tests.conftest import ROOT

TEMPLATE = json.loads((ROOT / "results/confirmation/arms/paired-consistency-s1/metrics.json").read_text())


def _family(name: str, split: str, base: float, tuned: float) -> dict:
    return {"family": name, "split": split, "n_groups": 12, "base_strict": base, "tuned_strict": tuned, "strict_change": tuned - base,
            "strict_ci_low": tuned - base - 0.05, "strict_ci_high": tuned - base + 0.05, "strict_p_value": 0.01,
            "base_loose": base + 0.05, "tuned_loose": tuned + 0.05, "loose_change": tuned - base}  # fmt: skip


def _metrics(compliance=(0.40, 0.55), words=(100.0, 110.0), helpfulness=(0.88, 0.90), reduction=0.45, female_tuned=None) -> dict:
    metrics = copy.deepcopy(TEMPLATE)
    c = metrics["consistency"]
    c["base_mean_words"], c["tuned_mean_words"] = words
    c["base_helpfulness"], c["tuned_helpfulness"] = helpfulness
    c["relative_gap_reduction"] = reduction
    if female_tuned is not None:
        metrics["fairness"]["discrim_eval"]["scores"]["gender_female"]["tuned_score"] = female_tuned
    metrics["instructions"] = {
        "families": [
            _family("length_constraints:number_words", "train", 0.3, 0.5),
            _family("change_case:english_lowercase", "train", 0.5, 0.6),
        ],
        "train": _family("train", "train", *compliance),
    }
    return metrics


def _judged(**kwargs) -> dict:
    return judge(EvaluationSummary.from_dict(_metrics(**kwargs)))


def test_an_arm_that_keeps_every_bound_passes_and_the_figures_are_its_own():
    judged = _judged()
    assert judged["passes"] and judged["failed"] == []
    figures = {name: v["value"] for name, v in judged["criteria"].items()}
    assert figures["train_compliance_change"] == pytest.approx(0.15)
    assert figures["gap_reduction"] == pytest.approx(0.45)
    assert figures["words_change"] == pytest.approx(0.10)
    assert figures["helpfulness_change"] == pytest.approx(0.02)
    assert judged["fairness"]["holds"] is True


@pytest.mark.parametrize(
    ("kwargs", "failed"),
    [
        ({"compliance": (0.40, 0.49)}, "train_compliance_change"),  # +0.09 < +0.10
        ({"reduction": 0.34}, "gap_reduction"),
        ({"words": (100.0, 126.0)}, "words_change"),  # +26 %
        ({"helpfulness": (0.88, 0.855)}, "helpfulness_change"),  # −0.025
        ({"female_tuned": 0.07}, "fairness"),  # |0.07| − |0.045| = 0.025 logit > 0.01
    ],
)
def test_each_criterion_that_fails_is_named_and_the_arm_does_not_pass(kwargs, failed):
    judged = _judged(**kwargs)
    assert not judged["passes"] and judged["failed"] == [failed]


def test_an_evaluation_without_instruction_figures_cannot_pass():
    metrics = _metrics()
    del metrics["instructions"]
    judged = judge(EvaluationSummary.from_dict(metrics))
    assert judged["criteria"]["train_compliance_change"] == {"value": None, "holds": None}
    assert judged["failed"] == ["train_compliance_change"] and not judged["passes"]


def test_the_page_gets_the_rule_and_each_family_after_its_title(tmp_path):
    layout = StudyLayout(tmp_path / "results" / "instruction-calibration")
    for arm, metrics in {"a": _metrics(), "b": _metrics(words=(100.0, 140.0))}.items():
        (layout.arms / arm).mkdir(parents=True)
        (layout.arms / arm / "metrics.json").write_text(json.dumps(metrics))
        (layout.arms / arm / "arm.json").write_text(json.dumps({"name": arm}))
    layout.report.write_text("# Study\n\nintro\n\n| arm | gap |\n|---|---|\n")
    page = add_rule(layout.report, layout, ["a", "b"]).read_text()
    assert page.startswith("# Study\n\n**Exploratory**") and "; passes: a." in page
    assert page.index("## The calibration's rule") < page.index("## Compliance per instruction family") < page.index("intro")
    rows = [line for line in page.splitlines() if line.startswith("| a |") or line.startswith("| b |")]
    assert "**passes**" in rows[0] and "fails: words_change" in rows[1]
    assert all(c.label in page for c in CRITERIA)
    assert "| a | length_constraints:number_words | 12 | 0.30 → 0.50 |" in page


def test_the_page_gives_each_arms_following_in_training_per_block_of_twenty_steps(tmp_path):
    layout = StudyLayout(tmp_path / "results" / "instruction-calibration")
    followed = {"short": [0.5] * 10 + [0.3] * 10, "long": [0.5] * 20 + [0.6] * 20 + [0.9] * 20}
    for arm, shares in followed.items():
        (layout.arms / arm).mkdir(parents=True)
        (layout.arms / arm / "metrics.json").write_text(json.dumps(_metrics()))
        (layout.arms / arm / "arm.json").write_text(json.dumps({"name": arm}))
        pd.DataFrame({"reward_mean": 1.0, FOLLOWING: shares}).to_csv(layout.arms / arm / "train_log.csv", index=False)
    layout.report.write_text("# Study\n\nintro\n")
    page = add_rule(layout.report, layout, ["short", "long"]).read_text()
    assert page.index("## Compliance per instruction family") < page.index("## Following in training") < page.index("intro")
    assert "| arm | steps 1–20 | steps 21–40 | steps 41–60 |" in page
    assert "| short | 0.40 |  |  |" in page and "| long | 0.50 | 0.60 | 0.90 |" in page
