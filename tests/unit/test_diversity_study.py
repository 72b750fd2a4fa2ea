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
from components.formatting import p_value
from components.machine import ISA_FLAGS, machine_label, machine_record
from components.study.diversity_report import COLUMNS, diversity_table, family, pool_seeds, power_lines, write_diversity_report
from components.study.layout import StudyLayout
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
    with pytest.raises(ParamsError, match=r"eval.domains: \['lists-\*'\] match no domain of the diversity groups; their domains: \['arith"):
        select_groups(groups, ["diversity"], ["list-*", "lists-*"], "eval.domains")  # a misspelt pattern is not ignored


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
    # every training arm of both studies runs three seeds; compare names the arms its seeds were expanded from
    gapo, seed = params.studies["gapo"], params.studies["seed"]
    assert list(gapo.arms)[:4] == ["grpo-validity-s1", "grpo-validity-s2", "grpo-validity-s3", "gapo-s1"] and len(gapo.arms) == 9
    assert {a.family for a in gapo.arms.values()} == {"grpo-validity", "gapo", "gapo-seed"}
    assert [a.overrides["seed"] for a in gapo.arms.values() if a.family == "gapo"] == [1234, 1235, 1236]
    assert gapo.compare == [("gapo", "grpo-validity"), ("gapo-seed", "gapo")] and seed.compare == [("seed-grpo", "grpo-correctness")]
    assert {a.family for a in seed.arms.values()} == {"grpo-correctness", "seed-grpo"} and len(seed.arms) == 6


LIST_ARMS = {"train": {"domains": ["list-*", "count-*"]}}


def _write_arm(arms_dir, name: str, frame: pd.DataFrame, overrides: dict | None = None) -> None:
    (arms_dir / name).mkdir(parents=True)
    frame.drop(columns="family", errors="ignore").to_csv(arms_dir / name / "per_group_diversity.csv", index=False)
    (arms_dir / name / "arm.json").write_text(json.dumps({"overrides": overrides or LIST_ARMS, "description": f"run {name}"}))


def _seeded(names: dict[str, int]) -> dict[str, dict]:
    """The report's view of a study config whose arms have seeds: {<arm>-s<i>: {family: <arm>}}."""
    return {f"{arm}-s{i}": {"description": arm, "family": arm} for arm, n in names.items() for i in range(1, n + 1)}


def test_seeds_are_pooled_per_task_and_their_spread_reported(tmp_path):
    """gapo (3 seeds) and grpo-validity (2 seeds) on 4 list tasks: each arm is the per-task mean of its seeds,
    base and tuned alike; the tests run over tasks on those means; the per-seed means give the spread."""
    gapo_tuned = [[1, 0, 1, 0], [1, 1, 0, 0], [1, 1, 1, 0]]  # per seed, per task: task means 1, 2/3, 2/3, 0
    gapo_base = [[0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]  # task means 0, 0, 1/3, 0
    grpo_tuned = [[0, 0, 1, 0], [0, 1, 0, 0]]  # task means 0, 1/2, 1/2, 0
    arms_dir = tmp_path / "gapo" / "arms"
    for i, (tuned, base) in enumerate(zip(gapo_tuned, gapo_base), start=1):
        frame = _tasks({"base": base, "tuned": tuned})
        _write_arm(arms_dir, f"gapo-s{i}", frame.iloc[::-1] if i == 2 else frame)  # pooled by task, not by row
    for i, tuned in enumerate(grpo_tuned, start=1):
        _write_arm(arms_dir, f"grpo-validity-s{i}", _tasks({"base": [0, 0, 0, 0], "tuned": tuned}))
    arms = _seeded({"grpo-validity": 3, "gapo": 3})  # grpo-validity-s3 has not finished: 2 seeds pooled
    text = write_diversity_report("gapo", StudyLayout(tmp_path / "gapo"), arms, [("gapo", "grpo-validity")], "cmd").read_text()
    table = pd.read_csv(tmp_path / "gapo" / "table.csv")
    assert set(table["arm"]) == {"gapo", "grpo-validity"}  # one arm per family, not per seed

    base, tuned, grpo = np.array([0, 0, 1 / 3, 0]), np.array([1, 2 / 3, 2 / 3, 0]), np.array([0, 0.5, 0.5, 0])
    row = table[(table["comparison"] == "vs base") & (table["arm"] == "gapo") & (table["metric"] == "all_valid")].iloc[0]
    assert row["n_tasks"] == 4 and row["seeds"] == 3
    assert row["reference"] == pytest.approx(base.mean()) and row["value"] == pytest.approx(tuned.mean())
    assert row["diff"] == pytest.approx((tuned - base).mean())
    assert row["p_value"] == pytest.approx(stats.ttest_rel(base, tuned).pvalue)
    assert row["detectable"] == pytest.approx(detectable_effect(float((tuned - base).std(ddof=1)), 4, 0.01, 0.8))
    per_seed = [0.5, 0.5, 0.75]  # each seed's mean over tasks
    assert (row["seed_min"], row["seed_max"]) == (0.5, 0.75) and row["seed_sd"] == pytest.approx(np.std(per_seed, ddof=1))

    h2h = table[(table["comparison"] == "head to head") & (table["metric"] == "all_valid")].iloc[0]
    assert (h2h["arm"], h2h["against"], h2h["seeds"], h2h["against_seeds"]) == ("gapo", "grpo-validity", 3, 2)
    assert h2h["reference"] == pytest.approx(grpo.mean()) and h2h["value"] == pytest.approx(tuned.mean())
    assert h2h["p_value"] == pytest.approx(stats.ttest_rel(grpo, tuned).pvalue)
    assert h2h["detectable"] == pytest.approx(detectable_effect(float((tuned - grpo).std(ddof=1)), 4, 0.01, 0.8))
    assert pd.isna(h2h["seed_sd"])  # the spread is each arm's own (its base row)

    assert "| gapo vs grpo-validity | all options named | 4 | 0.250 | 0.583 |" in text
    assert "## Seeds" in text and "| gapo | list selection | all options named | 3 | 0.583 | 0.500 – 0.750 | 0.144 |" in text
    assert "| grpo-validity | list selection | all options named | 2 | 0.250 | 0.250 – 0.250 | 0.000 |" in text
    assert "| gapo-s1 | list-*, count-* | not recorded | gapo |" in text and "| grpo-validity-s3 | n/a | n/a |" in text
    assert "not powered**: gapo vs grpo-validity, list selection, all options named: 4 tasks (3 and 2 seeds)" in text


def test_unseeded_arms_are_reported_as_before():
    """Pooling leaves an arm without seeds untouched: the same table, one seed, no spread."""
    base = [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    frames = {"gapo": _tasks({"base": base, "tuned": [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]}),
              "grpo": _tasks({"base": base, "tuned": [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]})}  # fmt: skip
    pooled, seeds = pool_seeds(frames, {"gapo": "gapo", "grpo": "grpo"})
    assert all(pooled[name] is frames[name] for name in frames)
    before = diversity_table(frames, [("gapo", "grpo")])
    after = diversity_table(pooled, [("gapo", "grpo")], seeds)
    pd.testing.assert_frame_equal(before, after)
    assert list(after.columns) == COLUMNS and (after["seeds"] == 1).all() and after["seed_sd"].isna().all()


def test_seeds_evaluated_on_different_tasks_are_refused(tmp_path):
    arms_dir = tmp_path / "gapo" / "arms"
    _write_arm(arms_dir, "gapo-s1", _tasks({"base": [0, 0, 1], "tuned": [1, 1, 0]}))
    _write_arm(arms_dir, "gapo-s2", _tasks({"base": [0, 0], "tuned": [1, 1]}))
    with pytest.raises(
        ValueError,
        match=r"arm 'gapo': its seeds were evaluated on different held-out tasks \(gapo-s1: 3 tasks, gapo-s2: 2 tasks; 2 in all\)",
    ):
        write_diversity_report("gapo", StudyLayout(tmp_path / "gapo"), _seeded({"gapo": 2}), [], "cmd")


def test_the_power_line_says_whether_the_head_to_head_detects_15_points():
    """Powered: the detectable difference of the family's first metric (list: all options named) is <= 0.15;
    only families both arms train on get a line."""
    for n, verdict in ((120, "powered"), (13, "not powered")):
        gapo_tuned = [float(i % 4 == 0) for i in range(n)]  # every 4th task all named by gapo, every 8th by GRPO
        grpo_tuned = [float(i % 8 == 0) for i in range(n)]
        arith = {"base": [0.2, 0.4, 0.1], "tuned": [0.5, 0.6, 0.2]}
        gapo = pd.concat([_tasks({"base": [0.0] * n, "tuned": gapo_tuned}), _tasks(arith, "validity", "arith")])
        grpo = pd.concat([_tasks({"base": [0.0] * n, "tuned": grpo_tuned}), _tasks(arith, "validity", "arith")])
        table = diversity_table({"gapo": gapo, "grpo-validity": grpo}, [("gapo", "grpo-validity")])
        row = table[(table["comparison"] == "head to head") & (table["metric"] == "all_valid")].iloc[0]
        sd = float(np.std(np.subtract(gapo_tuned, grpo_tuned), ddof=1))
        assert row["detectable"] == pytest.approx(detectable_effect(sd, n, 0.01, 0.8))
        assert bool(row["detectable"] <= 0.15) == (verdict == "powered")  # 120 tasks: 0.105; 13 tasks: 0.414
        (line,) = power_lines(table, {"gapo": {"list", "count"}, "grpo-validity": {"list", "count"}})  # arith: not trained
        sign = "≤" if verdict == "powered" else ">"
        assert line == (f"- **{verdict}**: gapo vs grpo-validity, list selection, all options named: {n} tasks "
                        f"(one seed each) detect {row['detectable']:.3f} {sign} 0.15 (α 0.01, 80 % power)")  # fmt: skip
        assert len(power_lines(table)) == 2  # without training domains: every family's line (arithmetic: accuracy)


def test_earlier_unseeded_runs_stand_in_until_a_seed_finishes(tmp_path):
    """A study whose arms gained seeds keeps reporting the arms' earlier unseeded runs (`arms/<arm>/`) until
    a seed arm finishes; from then on only the seeds count."""
    arms_dir = tmp_path / "gapo" / "arms"
    _write_arm(arms_dir, "gapo", _tasks({"base": [0, 0, 1], "tuned": [1, 1, 0]}))
    _write_arm(arms_dir, "grpo-validity", _tasks({"base": [0, 0, 1], "tuned": [0, 1, 0]}))
    arms, layout = _seeded({"grpo-validity": 3, "gapo": 3}), StudyLayout(tmp_path / "gapo")
    text = write_diversity_report("gapo", layout, arms, [("gapo", "grpo-validity")], "cmd").read_text()
    assert "**No seeded arm has finished yet**: grpo-validity, gapo are reported from their earlier runs" in text
    assert "| gapo | list-*, count-* | not recorded | run gapo (earlier run, no seeds) |" in text
    assert "| gapo vs grpo-validity | all options named | 3 | 0.333 | 0.667 |" in text
    _write_arm(arms_dir, "gapo-s1", _tasks({"base": [0, 0, 0], "tuned": [1, 1, 1]}))
    text = write_diversity_report("gapo", layout, arms, [("gapo", "grpo-validity")], "cmd").read_text()
    assert "earlier run" not in text and "| gapo vs base | all options named | 3 | 0.000 | 1.000 |" in text
    assert set(pd.read_csv(layout.table)["arm"]) == {"gapo"}  # grpo-validity's seeds have not run: no head to head


def test_the_report_puts_seed_level_inference_first_and_says_when_a_conclusion_changes(tmp_path):
    """gapo and grpo-validity, 3 seeds each on 6 list tasks (base 0): per seed, gapo's mean all-named rate is
    0.5, 0.5, 1.0 and grpo's 1/6, 1/6, 5/6; the seed-level test runs over those, head to head by seed index."""
    gapo_tuned = [[1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 1]]
    grpo_tuned = [[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]]
    arms_dir = tmp_path / "gapo" / "arms"
    for arm, per_seed in (("gapo", gapo_tuned), ("grpo-validity", grpo_tuned)):
        for i, tuned in enumerate(per_seed, start=1):
            _write_arm(arms_dir, f"{arm}-s{i}", _tasks({"base": [0] * 6, "tuned": tuned}))
    text = write_diversity_report("gapo", StudyLayout(tmp_path / "gapo"), _seeded({"grpo-validity": 3, "gapo": 3}),
                                  [("gapo", "grpo-validity")], "cmd").read_text()  # fmt: skip
    table = pd.read_csv(tmp_path / "gapo" / "table.csv")
    assert list(table.columns) == COLUMNS

    row = table[(table["comparison"] == "vs base") & (table["arm"] == "gapo") & (table["metric"] == "all_valid")].iloc[0]
    reference = stats.ttest_1samp([0.5, 0.5, 1.0], 0.0)  # t = 4 on 2 df: p = 1 − 4/√18
    assert row["n_seeds"] == 3 and json.loads(row["seed_diffs"]) == {"s1": 0.5, "s2": 0.5, "s3": 1.0}
    assert row["seed_diff"] == pytest.approx(2 / 3) and row["seed_p_value"] == pytest.approx(1 - 4 / np.sqrt(18))
    assert (row["seed_ci_low"], row["seed_ci_high"]) == tuple(pytest.approx(x) for x in reference.confidence_interval())
    # head to head pairs seed i with seed i: 1/3, 1/3, 1/6 (another pairing would give other differences)
    h2h = table[(table["comparison"] == "head to head") & (table["metric"] == "all_valid")].iloc[0]
    assert json.loads(h2h["seed_diffs"]) == pytest.approx({"s1": 1 / 3, "s2": 1 / 3, "s3": 1 / 6})
    assert h2h["seed_p_value"] == pytest.approx(stats.ttest_1samp([1 / 3, 1 / 3, 1 / 6], 0.0).pvalue)
    defined = table["seed_p_value"].notna()
    assert np.allclose(table.loc[defined, "seed_q_value"], stats.false_discovery_control(table.loc[defined, "seed_p_value"], method="bh"))
    # the mixed model is reported with its estimate, or says why not
    assert all(pd.notna(r["mixed_diff"]) != isinstance(r["mixed_note"], str) for _, r in table.iterrows())
    flat = table[(table["metric"] == "coverage")].iloc[0]  # every value 0.5: nothing varies
    assert pd.isna(flat["seed_p_value"]) and flat["mixed_note"] == "the differences are constant: nothing to fit"

    assert "## Seed-level inference (primary)" in text and "Seeds are the unit of replication for a training method" in text
    seed_level, task_level = (
        text.index("**Seed-level (primary)**:"),
        text.index("**Task-level (treats tasks as independent; ignores seed variation)**:"),
    )
    assert seed_level < task_level < text.index("| gapo vs base | all options named | 6 | 0.000 | 0.667 |")
    assert (
        f"| gapo vs base | all options named | 3 | s1 +0.500, s2 +0.500, s3 +1.000 | +0.667 [{row['seed_ci_low']:.3f}, 1.384] | 0.057 |"
        in text
    )
    # over tasks (pooled, tasks as independent) gapo's gain and its lead over grpo are significant; over 3 seeds neither
    assert (table["q_value"] < 0.01).sum() == 2 and row["q_value"] < 0.01 and (table["seed_q_value"].dropna() >= 0.01).all()
    assert text[text.index("| gapo vs base | all options named | 3 |") :].split("\n")[0].endswith("| task only |")
    assert (
        "**The conclusion changes at the seed level**: of the 2 comparisons significant over tasks (task-level q < 0.01), "
        "0 stay significant over the n = 3 seeds (seed-level q < 0.01) and 2 do not (1 of these with seed-level p < 0.05 "
        "before the correction); head to head, the verdict changes for gapo vs grpo-validity on list selection: "
        f"all options named (+0.278, seed-level p {p_value(h2h['seed_p_value'])}, task-level q {p_value(h2h['q_value'])})." in text
    )


def test_a_study_with_one_seed_an_arm_says_no_seed_level_inference_is_possible(tmp_path):
    arms_dir = tmp_path / "gapo" / "arms"
    _write_arm(arms_dir, "gapo", _tasks({"base": [0, 0, 1], "tuned": [1, 1, 1]}))
    _write_arm(arms_dir, "grpo-validity", _tasks({"base": [0, 0, 1], "tuned": [0, 1, 1]}))
    arms = {"gapo": {"description": "GAPO"}, "grpo-validity": {"description": "GRPO"}}
    text = write_diversity_report("gapo", StudyLayout(tmp_path / "gapo"), arms, [("gapo", "grpo-validity")], "cmd").read_text()
    assert "**One seed an arm**: no seed-level inference is possible" in text
    table = pd.read_csv(tmp_path / "gapo" / "table.csv")
    assert (table["n_seeds"] == 1).all() and table["seed_p_value"].isna().all()
    assert (table["mixed_note"] == "1 seed: no seed variance to estimate").all()
