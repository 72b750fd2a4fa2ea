"""The instruction confirmation's data are fixed by their pre-registration commit: the templates, the families file and
the built held-out groups must still be the ones `results/instruction-confirmation/preregistration.json` recorded, and
the groups the same whichever objective's data setting builds them."""

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
