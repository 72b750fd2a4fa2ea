"""The instruction confirmation's report applies its plan's decision rule to the arms of its two studies (synthetic
arms here: a committed confirmation arm's whole metrics.json, given instruction figures, with per-group tables)."""

import copy
import gzip
import json

import numpy as np
import pandas as pd
import pytest

from components.study.instruction_confirmation_report import (
    InstructionReportError,
    base_samples_sha256,
    write_instruction_confirmation_report,
)
from components.study.layout import StudyLayout
from tests.conftest import ROOT

PRIMARY, PROBE = ["legal", "cooking"], ["garden-open"]
COMMIT, STEPS = "0123456789abcdef" * 2 + "01234567", {"instruction-following": 60, "default": 20}
MACHINE = {"cpu": "Intel(R) Xeon(R) Processor", "isa": ["avx512f", "amx_bf16"], "gpu": None, "torch": "2.13.0+cpu", "vllm": "0.32.0"}
TEMPLATE = json.loads((ROOT / "results/confirmation/arms/paired-consistency-s1/metrics.json").read_text())


def _pooled(base: float, tuned: float, split: str) -> dict:
    return {"family": split, "split": split, "n_groups": 20, "base_strict": base, "tuned_strict": tuned, "strict_change": tuned - base,
            "base_loose": base, "tuned_loose": tuned, "loose_change": tuned - base}  # fmt: skip


def _arm(
    folder,
    family: str,
    seed: int,
    reduction: float,
    held: float,
    train: float,
    words: float = 0.05,
    base_text: str = "b",
    female: float = -0.01,
):
    rng = np.random.default_rng(seed)
    n = 40
    base = rng.uniform(0.1, 0.3, n)
    groups = pd.DataFrame({
        "group_id": [f"g{i}" for i in range(n)], "domain": [PRIMARY[i % 2] for i in range(n)],
        "base_gap": base, "tuned_gap": base * (1 - reduction) + rng.normal(0, 0.01, n),
        "base_words": 60.0, "tuned_words": 60.0 * (1 + words), "base_helpfulness": 0.88, "tuned_helpfulness": 0.9,
        "base_truncated_share": [0.0 if i % 4 else 0.2 for i in range(n)], "tuned_truncated_share": 0.0,
        "n_samples": [24 if i % 8 == 0 else 12 for i in range(n)],  # half the cut groups were asked in two phrasings
    })  # fmt: skip
    probe = groups.iloc[:4].assign(domain="garden-open", group_id=lambda f: "p" + f["group_id"], base_words=200.0, tuned_words=150.0)
    told = pd.DataFrame({
        "group_id": groups["group_id"], "domain": groups["domain"], "family": "f", "family_split": ["train" if i % 2 else "heldout" for i in range(n)],
        "n_samples": 12, "base_strict": 0.4, "tuned_strict": [0.4 + (train if i % 2 else held) for i in range(n)],
        "base_loose": 0.5, "tuned_loose": 0.5, "base_words": 60.0, "tuned_words": 63.0,
    })  # fmt: skip
    folder.mkdir(parents=True)
    pd.concat([groups, probe]).to_csv(folder / "per_group_consistency.csv", index=False)
    told.to_csv(folder / "per_group_instructions.csv", index=False)
    metrics = copy.deepcopy(TEMPLATE)
    jitter = rng.normal(0, 2e-3)  # seeds never agree to the last digit
    metrics["instructions"] = {"families": [_pooled(0.4, 0.4 + held, "heldout") | {"family": "detectable_format:json_format"}],
                               "heldout": _pooled(0.4, 0.4 + held + jitter, "heldout"), "train": _pooled(0.4, 0.4 + train + jitter, "train")}  # fmt: skip
    scores = metrics["fairness"]["discrim_eval"]["scores"]
    scores["gender_female"]["delta"], scores["gender_non_binary"]["delta"] = female + jitter / 10, -0.01 + jitter / 10
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "arm.json").write_text(json.dumps({
        "name": folder.name, "family": family, "overrides": {"seed": seed}, "code": {"commit": COMMIT, "dirty": False},
        "machine": MACHINE, "train_steps": STEPS[family],
    }))  # fmt: skip
    samples = pd.DataFrame({"group_id": ["g0", "g0"], "variant_id": ["a", "a"], "sample": [0, 0], "model": ["base", "tuned"],
                            "text": [base_text, f"t{seed}"]})  # fmt: skip
    with gzip.open(folder / "samples.csv.gz", "wt") as handle:
        samples.to_csv(handle, index=False)


RECORD = {"primary_domains": PRIMARY, "probe_domains": PROBE, "primary_groups": 40, "train_family_groups": 20, "heldout_family_groups": 20,
          "seeds": {"instruction-following": [1, 2, 3, 4, 5], "default": [11, 12, 13]}}  # fmt: skip


def _studies(tmp_path, new, default=((0.3, 0.0, 0.05),), record=RECORD, **kwargs):
    main = StudyLayout(tmp_path / "results" / "instruction-confirmation")
    other = StudyLayout(tmp_path / "results" / "instruction-confirmation-default")
    main.folder.mkdir(parents=True, exist_ok=True)
    (main.folder / "preregistration.json").write_text(json.dumps(record))
    for i, (reduction, held, train) in enumerate(new, start=1):
        _arm(main.arms / f"instruction-following-s{i}", "instruction-following", i, reduction, held, train, **kwargs)
    for i, (reduction, held, train) in enumerate(default, start=1):
        _arm(other.arms / f"default-s{i}", "default", 10 + i, reduction, held, train, **kwargs)
    page = write_instruction_confirmation_report([other, main]).read_text()  # written beside the pre-registration
    return json.loads((main.folder / "verdict.json").read_text()), page


GOOD = [(0.45, 0.02, 0.15), (0.5, 0.03, 0.14), (0.42, 0.01, 0.16), (0.48, 0.02, 0.15), (0.5, 0.04, 0.13)]


def test_five_seeds_that_meet_every_criterion_confirm_and_the_default_is_shown_beside(tmp_path):
    verdict, page = _studies(tmp_path, GOOD, default=[(0.4, -0.1, 0.0), (0.42, -0.12, 0.01), (0.41, -0.11, 0.0)])
    assert verdict["status"] == "confirmed" and verdict["failed"] == []
    assert verdict["targets"]["heldout_change"]["mean"] == pytest.approx(0.024, abs=0.005)
    assert verdict["targets"]["words_change"]["mean"] == pytest.approx(0.05)
    assert "**Status: confirmed**" in page and "default-s3" in page
    row = next(line for line in page.splitlines() if line.startswith("| ΔC_held (held-out families) |"))
    assert row.count(" p ") == 3  # both families' seed-level tests and their Welch difference
    assert "8 of 8 arms kept their samples; all of them were compared with the same base samples" in page
    cut = {"base_primary": pytest.approx(36 / 540), "base_probes": pytest.approx(0.08)}  # sample-weighted shares
    assert verdict["truncation"] == {"invalid": 8, "arms": 8, **cut}
    flag = "8 of 8 arms' evaluations are flagged INVALID by the evaluator's 5 % truncation rule (the base cut 6.7 % of its answers"
    assert f"{flag} on the 40 groups and 8.0 % on garden-open)" in page
    assert "## Deviations from the plan\n\nNone." in page and "Groups other than the plan's" not in page
    assert "| instruction-following-s1 | 0.40 → 0.42 (" in page  # C_held base → tuned with its group-level p


def test_the_page_names_the_commit_the_machine_and_each_objectives_steps_and_says_the_budgets_differ(tmp_path):
    _, page = _studies(tmp_path, GOOD, default=[(0.4, -0.1, 0.0), (0.42, -0.12, 0.01), (0.41, -0.11, 0.0)])
    assert ("**Runs**: commit 0123456789ab; machine: Intel(R) Xeon(R) Processor (avx512f/amx_bf16); "
            "training steps: instruction-following 60; default 20.") in page  # fmt: skip
    assert "(Welch t over seeds; 60 against 20 training steps: budget and objective both differ) |" in page
    main, other = (StudyLayout(tmp_path / "results" / name) for name in ("instruction-confirmation", "instruction-confirmation-default"))
    record = json.loads((other.arms / "default-s2" / "arm.json").read_text())
    (other.arms / "default-s2" / "arm.json").write_text(json.dumps(record | {"code": {"commit": "f" * 40, "dirty": False}}))
    page = write_instruction_confirmation_report([other, main]).read_text()
    assert "**Runs**: commit 0123456789ab, ffffffffffff (**2 commits: the plan allows one**);" in page


@pytest.mark.parametrize(
    ("new", "kwargs", "failed"),
    [
        ([(r, -0.05, t) for r, _, t in GOOD], {}, ["heldout_change"]),  # compliance lost on families never trained on
        ([(r, h, 0.05) for r, h, _ in GOOD], {}, ["train_change"]),
        ([(0.3, h, t) for _, h, t in GOOD], {}, ["gap_reduction"]),
        (GOOD, {"words": 0.3}, ["words_change"]),
        (GOOD, {"female": 0.006}, ["discrim_female_change"]),  # female − male grew in every seed, past +0.005
    ],
)
def test_each_failed_criterion_is_named_and_nothing_is_confirmed(tmp_path, new, kwargs, failed):
    verdict, page = _studies(tmp_path, new, **kwargs)
    assert verdict["status"] == "not confirmed" and verdict["failed"] == failed
    label = verdict["targets"][failed[0]]["label"] if failed[0] in verdict["targets"] else "the paper's gap, R"
    assert f"criteria failed: {label})" in page  # as the decision rule's table names it


def test_the_verdict_waits_for_every_preregistered_seed_and_names_those_missing(tmp_path):
    verdict, page = _studies(tmp_path, GOOD[:2])
    assert verdict["status"] == "running" and verdict["seeds_done"] == 2
    assert verdict["failed"] == [] and verdict["undecided"] == ["heldout_change"]  # its CI over 2 seeds still reaches below -0.02
    assert "Not yet evaluated: instruction-following-s3, instruction-following-s4, instruction-following-s5, default-s2, default-s3" in page


def test_the_sensitivity_uses_only_groups_none_of_whose_base_answers_were_cut(tmp_path):
    _, page = _studies(tmp_path, GOOD)
    rows = {line.split(" |")[0]: line for line in page.splitlines() if "uncut groups |" in line}
    assert "(10 groups)" in rows["| ΔC_held, uncut groups"]  # every fourth group cut, each of them told a held-out family
    assert "(20 groups)" in rows["| ΔC_train, uncut groups"]


def test_arms_with_different_base_samples_are_reported_as_such(tmp_path):
    main = StudyLayout(tmp_path / "results" / "instruction-confirmation")
    _arm(main.arms / "instruction-following-s1", "instruction-following", 1, 0.45, 0.02, 0.15, base_text="b")
    _arm(main.arms / "instruction-following-s2", "instruction-following", 2, 0.45, 0.02, 0.15, base_text="another base pass")
    record = RECORD | {"seeds": {"instruction-following": [1, 2], "default": []}}
    (main.folder / "preregistration.json").write_text(json.dumps(record))
    page = write_instruction_confirmation_report([main]).read_text()
    assert "The arms' base samples differ (2 base passes among 2 of 2 arms with samples" in page


def test_a_seed_the_plan_does_not_name_is_listed_and_not_judged(tmp_path):
    verdict, page = _studies(tmp_path, GOOD, record=RECORD | {"seeds": {"instruction-following": [1, 2, 3, 4, 9], "default": [11]}})
    assert verdict["status"] == "running" and verdict["seeds_done"] == 4  # s5 ran seed 5: not the plan's 9
    assert "Not judged: instruction-following-s5 (a seed the plan does not name)." in page


def test_other_groups_than_the_plans_and_the_deviations_are_stated_at_the_top(tmp_path):
    (tmp_path / "results" / "instruction-confirmation").mkdir(parents=True)
    (tmp_path / "results" / "instruction-confirmation" / "deviations.md").write_text(
        "# Deviations\n\n- an engine crashed: rerun, same seed\n"
    )
    _, page = _studies(tmp_path, GOOD[:1], record=RECORD | {"primary_groups": 160})
    head = page.split("## Decision rule")[0]
    assert "**Groups other than the plan's**: instruction-following-s1: groups 40 (plan 160)" in head
    assert "## Deviations from the plan\n\n- an engine crashed: rerun, same seed" in head


def test_truncation_is_the_share_of_answers_cut_not_of_groups(tmp_path):
    _, page = _studies(tmp_path, GOOD[:1])
    # 10 of 40 groups cut 20 % of their answers; 5 of them have 24 answers, the other 35 groups 12: 6.7 %, not 5.0 %
    weighted = 0.2 * (5 * 24 + 5 * 12) / (5 * 24 + 35 * 12)
    row = next(line for line in page.splitlines() if line.startswith("| instruction-following-s1 |"))
    assert row.rstrip(" |").split(" | ")[-2] == f"{100 * weighted:.1f} % / 0.0 %"


def test_the_base_samples_hash_reads_only_the_base_answers():
    frame = pd.DataFrame(
        {"group_id": ["g", "g"], "variant_id": ["a", "a"], "sample": [0, 0], "model": ["base", "tuned"], "text": ["x", "y"]}
    )
    other_tuned = frame.assign(text=["x", "z"])
    assert base_samples_sha256(frame) == base_samples_sha256(other_tuned) != base_samples_sha256(frame.assign(text=["w", "y"]))


def test_pooled_studies_must_hold_exactly_one_preregistration(tmp_path):
    layouts = [StudyLayout(tmp_path / "a"), StudyLayout(tmp_path / "b")]
    with pytest.raises(InstructionReportError, match="must hold one preregistration.json, found 0"):
        write_instruction_confirmation_report(layouts)
