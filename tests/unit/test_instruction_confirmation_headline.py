"""The README's instruction-following line: the calibration and the confirmation's progress while it runs, then the
confirmation's verdict with the decision rule's seed-level figures (synthetic verdicts here)."""

import json
import shutil
from pathlib import Path

from components.formatting import typographic
from components.study.headlines import instruction_confirmation, instruction_following
from components.study.instruction_confirmation_report import bound_text
from tests.conftest import ROOT


def _verdict(tmp_path, status: str, failed: list[str], truncation: dict | None = None, bounds: bool = False) -> None:
    folder = tmp_path / "results" / "instruction-confirmation"
    folder.mkdir(parents=True)
    stat = lambda mean, low, high: {"mean": mean, "ci_low": low, "ci_high": high}  # noqa: E731
    verdict = {"status": status, "seeds_done": 5, "seeds_planned": 5, "gap_reduction": stat(0.41, 0.33, 0.49), "failed": failed,
               "targets": {"heldout_change": stat(0.012, -0.011, 0.035), "train_change": stat(0.14, 0.1, 0.18),
                           "words_change": stat(-0.12, -0.2, -0.04),
                           "discrim_female_change": stat(0.01, -0.01, 0.03) | {"label": "DiscrimEval female − male"}},
               "truncation": truncation}  # fmt: skip
    if bounds:  # as the report writes them: the bound and the statistic that must meet it
        verdict["targets"]["heldout_change"] |= {"bound": -0.02, "statistic": "ci_low", "at_most": False}
        verdict["targets"]["train_change"] |= {"bound": 0.1, "statistic": "mean", "at_most": False}
        verdict["targets"]["words_change"] |= {"bound": 0.25, "statistic": "mean", "at_most": True}
    (folder / "verdict.json").write_text(json.dumps(verdict))
    (folder / "preregistration.json").write_text(json.dumps({"primary_groups": 160}))


def _results_while_running(tmp_path):
    """The committed calibration and confirmation records (their JSON files) with the verdict set back to running."""
    for study in ("instruction-calibration", "instruction-confirmation", "instruction-confirmation-default"):
        keep_json = lambda folder, names: [n for n in names if not (Path(folder) / n).is_dir() and not n.endswith(".json")]  # noqa: E731
        shutil.copytree(ROOT / "results" / study, tmp_path / "results" / study, ignore=keep_json)
    (tmp_path / "results" / "instruction-confirmation" / "verdict.json").write_text(json.dumps({"status": "running"}))
    return tmp_path


def test_while_the_confirmation_runs_the_line_is_the_calibrations_with_its_progress(tmp_path):
    root = _results_while_running(tmp_path)
    assert instruction_confirmation(root) is None
    line = instruction_following(root).line()
    assert line.startswith("- **exploratory** · instruction following, calibration (train groups, 1 seed each)")
    assert "its pre-registered confirmation is running (5 of 5 seeds, 3 of 3 of the default's)" in line


def test_the_committed_line_is_the_committed_verdicts(tmp_path):
    verdict = json.loads((ROOT / "results" / "instruction-confirmation" / "verdict.json").read_text())
    headline = instruction_following(ROOT)
    if verdict["status"] == "running":
        assert headline.label == "exploratory" and "is running" in headline.text
    else:
        assert headline.label == verdict["status"] and headline.link == "results/instruction-confirmation/report.md"
        assert f"{verdict['seeds_done']} seeds" in headline.text and headline.text.count("(failed") == len(
            set(verdict["failed"]) & {"heldout_change", "train_change", "gap_reduction", "words_change"}
        )


def test_a_verdict_replaces_it_with_the_decision_rules_figures_and_what_failed(tmp_path):
    _verdict(tmp_path, "not confirmed", ["heldout_change"])
    line = instruction_confirmation(tmp_path).line()
    assert line.startswith("- **not confirmed** · instruction-following reward, 160 new groups, 5 seeds: ")
    assert "held-out-family compliance +0.012 [−0.011, +0.035] (failed), train families +0.140, " in line
    assert line.endswith("; the default stays ([report](results/instruction-confirmation/report.md))")


def test_a_failed_criterion_names_its_bound_and_one_not_shown_is_listed(tmp_path):
    _verdict(tmp_path, "not confirmed", ["heldout_change", "train_change", "discrim_female_change"], bounds=True)
    line = instruction_confirmation(tmp_path).line()
    assert "held-out-family compliance +0.012 [−0.011, +0.035] (failed: CI low ≥ −0.02)" in line
    assert "train families +0.140 (failed: ≥ +0.1)" in line and "gap reduction 41 % [33 %, 49 %], words −12 %" in line
    assert "; failed: DiscrimEval female − male; the default stays" in line


def test_a_failed_criterions_bound_reads_as_the_reports_decision_table_prints_it(tmp_path):
    """The README line and report.md's decision rule print each bound alike: words as a relative change in percent."""
    _verdict(tmp_path, "not confirmed", ["train_change", "words_change"], bounds=True)
    line = instruction_confirmation(tmp_path).line()
    assert "words −12 % (failed: ≤ +25 %)" in line
    for name, shown in (("train_change", "≥ +0.1"), ("words_change", "≤ +25 %"), ("heldout_change", "≥ −0.02")):
        target = json.loads((tmp_path / "results" / "instruction-confirmation" / "verdict.json").read_text())["targets"][name]
        assert typographic(bound_text(name, target["bound"], target["at_most"])) == shown


def test_a_confirmed_verdict_says_every_criterion_held(tmp_path):
    _verdict(tmp_path, "confirmed", [])
    line = instruction_confirmation(tmp_path).line()
    assert line.startswith("- **confirmed** · ") and line.count("; every criterion held") == 1 and "train families +0.14" in line


def test_a_verdict_gives_the_truncation_flag_and_a_failed_one_says_the_default_stays(tmp_path):
    flag = {"invalid": 6, "arms": 8, "base_primary": 0.232, "base_probes": 0.61}
    _verdict(tmp_path, "not confirmed", ["train_change"], truncation=flag)
    line = instruction_confirmation(tmp_path).line()
    assert "train families +0.140 (failed), " in line
    assert "words −12 %; 6 of 8 arms INVALID by the 5 % truncation rule (base cut 23.2 %, probes 61.0 %); the default stays (" in line
    _verdict(tmp_path / "kept", "confirmed", [], truncation=flag | {"invalid": 0})
    line = instruction_confirmation(tmp_path / "kept").line()
    assert "INVALID" not in line and "stays" not in line
