"""The instruction confirmation's data are fixed by their pre-registration commit: the templates, the families file and
the built held-out groups must still be the ones `results/instruction-confirmation/preregistration.json` recorded, and
the groups the same whichever objective's data setting builds them. Its amended plan and both studies' frozen params
are the ones it recorded before any arm trained; both studies judge those groups alike and train alike but for the
objective and its steps."""

import hashlib
import json
from pathlib import Path

import pytest

from components.config import DataConfig

ROOT = Path(__file__).resolve().parents[2]
RECORD = json.loads((ROOT / "results/instruction-confirmation/preregistration.json").read_text())


def test_the_templates_and_the_families_file_are_the_preregistered_ones():
    folder = ROOT / RECORD["templates"]
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.yaml"))}
    assert found == RECORD["template_sha256"]
    assert hashlib.sha256((ROOT / RECORD["families"]).read_bytes()).hexdigest() == RECORD["families_sha256"]


@pytest.mark.parametrize("instructions", ["answer_instruction", "families"])  # the default objective's setting, the new one's
def test_the_built_groups_are_the_preregistered_ones_held_out_and_told_one_instruction_each(instructions):
    from components.data import build_groups
    from components.instructions.families import load_families

    families = load_families(ROOT / RECORD["families"])
    groups = build_groups(
        ROOT / "data/templates", DataConfig(instructions=instructions), RECORD["build_seed"], ROOT / RECORD["templates"], families
    )
    chosen = sorted((g for g in groups if g.domain in RECORD["primary_domains"] + RECORD["probe_domains"]), key=lambda g: g.group_id)
    assert {g.split for g in chosen} == {"heldout"} and len(chosen) == RECORD["groups"]
    primary = [g for g in chosen if g.domain in RECORD["primary_domains"]]
    assert len(primary) == RECORD["primary_groups"] and all(g.instruction is not None for g in primary)
    assert all(g.instruction is None for g in chosen if g.domain in RECORD["probe_domains"])
    splits = [families.split_of(g.instruction.family) for g in primary]
    assert (splits.count("train"), splits.count("heldout")) == (RECORD["train_family_groups"], RECORD["heldout_family_groups"])
    rows = "".join(g.model_dump_json() + "\n" for g in chosen)
    assert hashlib.sha256(rows.encode()).hexdigest() == RECORD["groups_sha256"]


def test_the_calibration_that_chooses_the_recipe_runs_its_preregistered_rule_params_and_seeds():
    from components.study.domain import load_study

    record = json.loads((ROOT / "results/instruction-calibration/preregistration.json").read_text())
    for name in ("plan", "frozen_params"):
        path = ROOT / "results/instruction-calibration" / (f"{name}.md" if name == "plan" else f"{name}.json")
        assert hashlib.sha256(path.read_bytes()).hexdigest() == record[f"{name}_sha256"], path
    _, study = load_study(ROOT / "params.yaml", "instruction-calibration")
    seeds: dict[str, list[int]] = {}
    for name, arm in study.config.arms.items():
        seeds.setdefault(arm.family or name, []).append(arm.overrides["seed"])
    assert seeds == record["seeds"]
    params = json.loads(study.layout.frozen_params.read_text())["params"]
    assert (params["train"]["precision"], params["eval"]["dtype"], params["eval"]["embedding_dtype"]) == ("fp32", "float32", "float32")
    assert params["eval"]["fairness"]["dtype"] == params["train"]["rollout"]["vllm"]["dtype"] == "float32"


STUDIES = ("instruction-confirmation", "instruction-confirmation-default")  # the new objective's arms, the default's


def _arms(name: str):
    from components.study.domain import arm_params, load_study, study_params

    params, study = load_study(ROOT / "params.yaml", name)
    return study, study_params(params, study), {arm: arm_params(params, study, arm) for arm in study.config.arms}


@pytest.mark.parametrize("name", STUDIES)
def test_each_study_evaluates_the_preregistered_groups_with_the_planned_seeds(name, monkeypatch):
    from components.data import build_groups
    from components.instructions.families import load_families

    monkeypatch.chdir(ROOT)  # the studies' paths are relative to the project
    study, shared, arms = _arms(name)
    groups = build_groups(
        shared.paths.templates, shared.data, shared.seed, shared.paths.heldout_templates, load_families(ROOT / RECORD["families"])
    )
    judged = sorted((g for g in groups if g.domain in shared.eval.domains), key=lambda g: g.group_id)  # what its evaluation selects
    assert hashlib.sha256("".join(g.model_dump_json() + "\n" for g in judged).encode()).hexdigest() == RECORD["groups_sha256"]
    family = "instruction-following" if name == STUDIES[0] else "default"
    assert [arm.overrides["seed"] for arm in study.config.arms.values()] == RECORD["seeds"][family]
    assert all(p.eval_seed == RECORD["eval_seed"] and p.eval.max_consistency_groups >= RECORD["groups"] for p in arms.values())
    assert study.config.report == "instruction_confirmation" and study.config.pooled_with == [s for s in STUDIES if s != name]


def test_both_studies_judge_alike_in_float32_and_differ_only_in_the_objective():
    (_, a, arms_a), (_, b, arms_b) = _arms(STUDIES[0]), _arms(STUDIES[1])
    for params in [*arms_a.values(), *arms_b.values()]:
        assert params.eval.model_dump() == next(iter(arms_a.values())).eval.model_dump()  # every evaluation setting, one value
        assert (params.train.precision, params.eval.dtype, params.eval.embedding_dtype) == ("fp32", "float32", "float32")
        assert params.eval.vllm.block_size == 32 and params.eval.max_new_tokens == 512 and params.eval.samples_per_prompt == 6
    assert (a.data.instructions, b.data.instructions) == ("families", "answer_instruction")
    assert (a.reward.weights["instruction_compliance"], b.reward.weights["instruction_compliance"]) == (0.0, 0.6)
    assert (a.reward.weights["instruction_following"], b.reward.weights.get("instruction_following", 0.0)) == (
        0.6,
        0.0,
    )  # the calibrated weight
    assert (a.train.steps, b.train.steps) == (60, 20)  # the calibrated budget; the default's as the product trains it
    assert a.train.model_copy(update={"steps": 0}) == b.train.model_copy(update={"steps": 0}) and a.lora == b.lora


def test_the_amended_plan_and_both_frozen_params_are_the_preregistered_ones():
    assert hashlib.sha256((ROOT / RECORD["plan"]).read_bytes()).hexdigest() == RECORD["plan_sha256"]
    for name, sha256 in RECORD["frozen_params_sha256"].items():
        assert hashlib.sha256((ROOT / "results" / name / "frozen_params.json").read_bytes()).hexdigest() == sha256, name
    assert set(RECORD["frozen_params_sha256"]) == set(STUDIES)
