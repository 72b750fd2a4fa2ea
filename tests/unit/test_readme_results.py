"""The README's results cannot drift from results/: its generated blocks must be what the committed
artifacts give (`components.study.headlines`), and the headline functions read their figures from a
study's files, shown here on synthetic result folders. Nothing runs a model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from components.study import headlines
from components.study.readme_blocks import read_block, replace_block, stale_blocks, write_blocks
from components.study.reference_run import OTHER_TIMINGS, TIMING, objective, timing_sentence

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"\(\[[^\]]+\]\(([^)]+)\)\)$")
LABELS = ("exploratory", "confirmed", "not confirmed")


def test_the_readme_and_results_page_blocks_are_what_results_gives():
    files = headlines.generated_blocks(ROOT)
    assert set(files) == {README, ROOT / "docs" / "results.md", ROOT / "docs" / "benchmarks.md"}
    stale = {path.name: stale_blocks(path, blocks) for path, blocks in files.items() if stale_blocks(path, blocks)}
    assert not stale, f"generated blocks {stale} differ from results/: run `python -m components.study.headlines --write`"


def test_the_results_page_links_resolve_from_docs():
    lines = read_block((ROOT / "docs" / "results.md").read_text(), "results")
    assert len(lines) == len(headlines.HEADLINES)
    for line in lines:
        (link,) = LINK.search(line).groups()
        assert link.startswith("../") and (ROOT / "docs" / link).resolve().is_file(), line


def test_the_results_block_is_short_labelled_and_links_to_files_that_exist():
    lines = read_block(README.read_text(), "results")
    assert 0 < len(lines) <= 12
    for line in lines:
        label = re.match(r"^- \*\*([^*]+)\*\* · ", line)
        assert label and (label[1] in LABELS or label[1].startswith("pre-registered, running")), line
        link = LINK.search(line)
        assert link and (ROOT / link[1]).is_file(), f"no linked file: {line}"
        prose = line[label.end() : link.start()]
        assert len(prose) <= 320, f"{len(prose)} characters: {prose}"  # a result, its inference and its evidence flags


def test_every_results_line_comes_from_one_registered_headline():
    assert len(read_block(README.read_text(), "results")) == len(headlines.HEADLINES)


# ---- the blocks ------------------------------------------------------------------------------------------------


def test_a_block_is_replaced_in_place_and_everything_else_kept(tmp_path):
    text = "# T\n\nintro\n<!-- x:start -->\nold 1\nold 2\n<!-- x:end -->\nafter\n"
    assert read_block(text, "x") == ["old 1", "old 2"]
    assert replace_block(text, "x", ["new"]) == "# T\n\nintro\n<!-- x:start -->\nnew\n<!-- x:end -->\nafter\n"
    path = tmp_path / "R.md"
    path.write_text(text)
    assert stale_blocks(path, {"x": ["new"]}) == ["x"]
    assert write_blocks(path, {"x": ["new"]}) == ["x"] and stale_blocks(path, {"x": ["new"]}) == []
    assert write_blocks(path, {"x": ["new"]}) == []


def test_a_missing_or_doubled_marker_is_an_error():
    with pytest.raises(ValueError, match="y:start"):
        read_block("<!-- x:start -->\n<!-- x:end -->\n", "y")
    with pytest.raises(ValueError):
        read_block("<!-- x:start -->\n<!-- x:start -->\n<!-- x:end -->\n", "x")


# ---- headline functions on synthetic result folders -------------------------------------------------------------


def _consistency_row(arm: str, family: str, base: float, tuned: float, q: float, words: tuple[float, float], gates: str) -> dict:
    return {"arm": arm, "family": family, "scope": "overall", "n_groups": 104, "base_gap": base, "tuned_gap": tuned,
            "relative_reduction": 1 - tuned / base, "q_value": q, "base_words": words[0], "tuned_words": words[1],
            "gate_all": gates}  # fmt: skip


def _table(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    scoped = [r | {"scope": "job", "q_value": 0.5} for r in rows]  # a per-domain row the headline must skip
    pd.DataFrame([*rows, *scoped]).to_csv(folder / "table.csv", index=False)


def test_the_consistency_headline_reads_the_main_arm_of_the_table(tmp_path):
    _table(tmp_path / "results" / "consistency", [
        _consistency_row("greedy", "greedy", 0.2, 0.25, 0.2, (60, 80), "refused: significance"),
        _consistency_row("grpo", "grpo", 0.200, 0.050, 3.14e-7, (50, 150), "refused: length_growth (n/a: compliance)"),
    ])  # fmt: skip
    headline = headlines.consistency(tmp_path)
    assert headline.label == "exploratory" and headline.link == "results/consistency/report.md"
    assert "gap 0.200 → 0.050 (−75 %, q 3.1e-07)" in headline.text
    assert "answers +200 % long: refused by `length_growth`" in headline.text


def test_the_compliance_parity_headline_reads_every_seed_and_its_decisions(tmp_path):
    study = tmp_path / "results" / "compliance-parity"
    arm = headlines.PARITY_ARM
    _table(study, [_consistency_row(f"{arm}-s{s}", arm, 0.2, tuned, q, (60, 50), "pass")
                   for s, tuned, q in ((1, 0.1, 1e-9), (2, 0.12, 4.24e-5), (3, 0.09, 2e-9))])  # fmt: skip
    for s, tuned in ((1, 0.02), (2, -0.005), (3, 0.003)):
        (study / "arms" / f"{arm}-s{s}").mkdir(parents=True)
        score = {"base_score": 0.045, "tuned_score": tuned}
        metrics = {"fairness": {"discrim_eval": {"scores": {"gender_female": score}}}}
        (study / "arms" / f"{arm}-s{s}" / "metrics.json").write_text(json.dumps(metrics))
    text = headlines.compliance_parity(tmp_path).text
    assert "3 seeds" in text and "gap −50 % / −40 % / −55 % (q ≤ 4.2e-05)" in text
    assert "female − male +0.045 → +0.020 / −0.005 / +0.003" in text and "every default gate passed in each seed" in text


def _preregistered(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"primary_groups": 160, "primary_domains": ["a", "b", "c", "d"], "seeds": {"recipe": [1, 2, 3, 4, 5], "paper": [1, 2, 3]}}
    (folder / "preregistration.json").write_text(json.dumps(record))


def test_the_confirmation_is_running_until_its_verdict_and_then_says_it(tmp_path):
    folder = tmp_path / "results" / "confirmation"
    _preregistered(folder)
    running = headlines.confirmation(tmp_path)
    assert running.label == "pre-registered, running (0 of 5 seeds)" and running.link.endswith("plan.md")
    (folder / "verdict.json").write_text(json.dumps({"status": "running", "seeds_done": 2, "seeds_planned": 5}))
    assert headlines.confirmation(tmp_path).label == "pre-registered, running (2 of 5 seeds)"
    primary = {"mean": 0.41, "ci_low": 0.27, "ci_high": 0.55, "p_value": 3e-4, "n": 5}
    (folder / "verdict.json").write_text(json.dumps({"status": "confirmed", "seeds_done": 5, "primary": primary, "failed": []}))
    done = headlines.confirmation(tmp_path)
    assert done.label == "confirmed" and done.link.endswith("report.md")
    assert "gap reduction 41 % [27 %, 55 %] over 5 seeds, p 3.0e-04" in done.text and "failed" not in done.text
    assert done.text.endswith("; every secondary target held")  # an older verdict without its targets
    targets = {"compliance_change": {"mean": 0.188}, "words_change": {"mean": -0.079}, "discrim_female_change": {"mean": -0.0391}}
    (folder / "verdict.json").write_text(json.dumps({"status": "confirmed", "seeds_done": 5, "primary": primary, "failed": [],
                                                     "targets": targets}))  # fmt: skip
    assert "; every secondary target held (compliance +0.19, words −8 %, DiscrimEval female − male −0.039 logit)" in (
        headlines.confirmation(tmp_path).text
    )
    (folder / "verdict.json").write_text(json.dumps({"status": "not confirmed", "seeds_done": 5, "primary": primary,
                                                     "failed": ["words_change"]}))  # fmt: skip
    refused = headlines.confirmation(tmp_path)
    assert refused.label == "not confirmed" and "failed: words_change" in refused.text
    assert refused.line().startswith("- **not confirmed** · confirmation")


def test_gapo_and_seed_show_seed_level_inference_only(tmp_path):
    """Each seed's difference is a unit: the task-level q (tasks of one seed as independent evidence) is not shown."""
    row = {"comparison": "head to head", "arm": "gapo", "against": "grpo-validity", "family": "list", "n_tasks": 125,
           "seeds": 3, "q_value": 3e-16}  # fmt: skip
    folder = tmp_path / "results" / "gapo"
    folder.mkdir(parents=True)
    rows = [
        row | {"metric": "coverage", "reference": 0.43, "value": 0.56},
        row | {"metric": "all_valid", "reference": 0.027, "value": 0.096},
    ]
    pd.DataFrame(rows).to_csv(folder / "table.csv", index=False)
    assert "coverage 0.43 → 0.56 (no seed-level inference recorded), every option named 2.7 % → 9.6 %" in headlines.gapo(tmp_path).text
    seed_level = {"n_seeds": 3, "seed_diff": 0.122, "seed_ci_low": 0.009, "seed_ci_high": 0.235, "seed_q_value": 0.3}
    pd.DataFrame([r | seed_level for r in rows]).to_csv(folder / "table.csv", index=False)
    text = headlines.gapo(tmp_path).text
    assert "coverage 0.43 → 0.56 (+0.12 [+0.01, +0.23] over 3 seeds, q 0.3)" in text
    assert "of tasks (+12.2 [+0.9, +23.5] points over 3 seeds, q 0.3)" in text
    assert "over tasks" not in text and "3.0e-16" not in text


def test_the_reference_run_names_the_paper_reward_and_any_other_objective():
    paper = {"reward": {"weights": {"entropy_helpfulness": 0.4, "stability": 0.6}}}
    assert objective(paper) == "the paper's reward (entropy_helpfulness 0.4, stability 0.6)"
    paired = {"reward": {"weights": {"entropy_helpfulness": 0.4, "stability": 0.6, "instruction_compliance": 0.6}},
              "train": {"decision_pairing": {"weight": 0.25}}}  # fmt: skip
    assert objective(paired) == "the reward entropy_helpfulness 0.4, stability 0.6, instruction_compliance 0.6 with the pairing term λ 0.25"


def test_the_quick_start_time_is_read_from_the_committed_log_of_one_make_run(tmp_path):
    log = tmp_path / TIMING
    log.parent.mkdir(parents=True)
    lines = [
        "# cd <fresh clone> && /usr/bin/time -v make run",
        "# 2026-11-29, 2-core CPU with AVX512-BF16; nothing else running",
        "  train: 4 steps, 120 samples in 184 s; final reward 1.455, KL 0.0089",
        "    time: engine start 7 %, sampling 52 % (of 267 s)",
        "\tElapsed (wall clock) time (h:mm:ss or m:ss): 9:10.31",
    ]
    log.write_text("\n".join(lines) + "\n")
    assert timing_sentence(tmp_path, "../") == (
        "`make run` after installation took 9 min 10 s on a 2-core CPU with AVX512-BF16 (training 184 s, evaluation 267 s; "
        "[log](../results/speed/make_run.txt))."
    )
    other = tmp_path / OTHER_TIMINGS[0]  # another CPU kind's log, installation included in its wall clock
    other.write_text("# cd <fresh clone> && make run (installation included: 61 s)\n" + "\n".join(lines[1:4]).replace("AVX512-BF16", "AVX2 only")
                     + "\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 24:05.10\n")  # fmt: skip
    assert timing_sentence(tmp_path) == (
        "`make run` after installation took 9 min 10 s on a 2-core CPU with AVX512-BF16 (training 184 s, evaluation 267 s; "
        f"[log](results/speed/make_run.txt)) and 23 min 4 s on a 2-core CPU with AVX2 only (training 184 s, evaluation 267 s; [log]({OTHER_TIMINGS[0]}))."
    )
    log.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="make_run.txt: no line matches"):
        timing_sentence(tmp_path)


def _calibration_arm(
    root: Path, name: str, weight: float, compliance_change: float, gap_reduction: float, steps: int | None = None
) -> None:
    metrics = json.loads((ROOT / "results/instruction-calibration/arms/following-0.6/metrics.json").read_text())
    metrics["instructions"]["train"]["strict_change"] = compliance_change
    metrics["consistency"]["relative_gap_reduction"] = gap_reduction
    folder = root / "results" / "instruction-calibration" / "arms" / name
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    overrides = {"reward": {"weights": {"instruction_following": weight}}, **({"train": {"steps": steps}} if steps else {})}
    (folder / "arm.json").write_text(json.dumps({"name": name, "overrides": overrides}))


def test_the_instruction_following_line_gives_each_setting_and_whether_the_confirmation_runs(tmp_path):
    _calibration_arm(tmp_path, "a", 0.6, -0.016, 0.353)
    _calibration_arm(tmp_path, "b", 1.5, 0.12, 0.30)  # compliance enough, gap not
    line = headlines.instruction_following(tmp_path)
    assert line.label == "exploratory" and line.link == "results/instruction-calibration/report.md"
    assert "strict compliance −0.016 at weight 0.6, +0.120 at weight 1.5 (+0.10 needed)" in line.text
    assert "was not run and the default objective stays" in line.text
    _calibration_arm(tmp_path, "b2", 0.6, 0.02, 0.40, steps=60)  # an arm with a budget of its own says so
    assert (
        "−0.016 at weight 0.6, +0.120 at weight 1.5, +0.020 at weight 0.6 over 60 steps (" in headlines.instruction_following(tmp_path).text
    )
    _calibration_arm(tmp_path, "c", 1.0, 0.12, 0.40)
    assert (
        "+0.120 at weight 1 (+0.10 needed); c passed the calibration's rule: the recipe the pre-registered confirmation tests"
        in headlines.instruction_following(tmp_path).text
    )
