"""The README's instruction-following line: the calibration and the confirmation's progress while it runs, then the
confirmation's verdict with the decision rule's seed-level figures (synthetic verdicts here)."""

import json

from components.study.headlines import instruction_confirmation, instruction_following
from tests.conftest import ROOT


def _verdict(tmp_path, status: str, failed: list[str], truncation: dict | None = None) -> None:
    folder = tmp_path / "results" / "instruction-confirmation"
    folder.mkdir(parents=True)
    stat = lambda mean, low, high: {"mean": mean, "ci_low": low, "ci_high": high}  # noqa: E731
    verdict = {"status": status, "seeds_done": 5, "seeds_planned": 5, "gap_reduction": stat(0.41, 0.33, 0.49), "failed": failed,
               "targets": {"heldout_change": stat(0.012, -0.011, 0.035), "train_change": stat(0.14, 0.1, 0.18),
                           "words_change": stat(-0.12, -0.2, -0.04)}, "truncation": truncation}  # fmt: skip
    (folder / "verdict.json").write_text(json.dumps(verdict))
    (folder / "preregistration.json").write_text(json.dumps({"primary_groups": 160}))


def test_while_the_confirmation_runs_the_line_is_the_calibrations_with_its_progress():
    assert instruction_confirmation(ROOT) is None  # no verdict yet: running
    line = instruction_following(ROOT).line()
    assert line.startswith("- **exploratory** · instruction following, calibration (train groups, 1 seed each)")
    assert "its pre-registered confirmation is running (" in line and " of 5 seeds, " in line and " of 3 of the default's)" in line


def test_a_verdict_replaces_it_with_the_decision_rules_figures_and_what_failed(tmp_path):
    _verdict(tmp_path, "not confirmed", ["heldout_change"])
    line = instruction_confirmation(tmp_path).line()
    assert line.startswith(
        "- **not confirmed** · instruction confirmation, the instruction-following objective on 160 new groups (5 seeds)"
    )
    assert "held-out-family compliance +0.012 [−0.011, +0.035]" in line and "; failed: heldout_change" in line
    assert line.endswith("([report](results/instruction-confirmation/report.md))")


def test_a_confirmed_verdict_says_every_criterion_held(tmp_path):
    _verdict(tmp_path, "confirmed", [])
    line = instruction_confirmation(tmp_path).line()
    assert line.startswith("- **confirmed** · ") and line.count("; every criterion held") == 1 and "train families +0.14" in line


def test_a_verdict_gives_the_truncation_flag_and_a_failed_one_says_the_default_stays(tmp_path):
    flag = {"invalid": 6, "arms": 8, "base_primary": 0.232, "base_probes": 0.61}
    _verdict(tmp_path, "not confirmed", ["train_change"], truncation=flag)
    line = instruction_confirmation(tmp_path).line()
    assert "; failed: train_change; 6 of 8 arms INVALID by the 5 % truncation rule (base cut 23.2 %, probes 61.0 %)" in line
    assert "; the default objective stays as it is (" in line
    _verdict(tmp_path / "kept", "confirmed", [], truncation=flag | {"invalid": 0})
    line = instruction_confirmation(tmp_path / "kept").line()
    assert "INVALID" not in line and "stays" not in line
