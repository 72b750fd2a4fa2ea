"""The confirmation's data and plan are fixed by their pre-registration commit: the templates, the built
held-out groups and the seeds must still be the ones `results/confirmation/preregistration.json` recorded."""

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = json.loads((ROOT / "results/confirmation/preregistration.json").read_text())


def test_the_confirmation_templates_are_the_preregistered_ones():
    folder = ROOT / RECORD["templates"]
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.yaml"))}
    assert found == RECORD["template_sha256"]


def test_the_built_confirmation_groups_are_the_preregistered_ones_and_all_held_out():
    from components.data import build_groups
    from components.study.domain import load_study, study_params

    params = study_params(*load_study(ROOT / "params.yaml", "confirmation"))
    assert params.paths.heldout_templates == ROOT / RECORD["templates"] and params.seed == RECORD["build_seed"]
    groups = build_groups(params.paths.templates, params.data, params.seed, params.paths.heldout_templates)
    domains = set(RECORD["primary_domains"]) | set(RECORD["probe_domains"])
    chosen = sorted((g for g in groups if g.domain in domains), key=lambda g: g.group_id)
    assert {g.split for g in chosen} == {"heldout"}
    assert len(chosen) == RECORD["groups"] and sum(g.domain in RECORD["primary_domains"] for g in chosen) == RECORD["primary_groups"]
    rows = "".join(g.model_dump_json() + "\n" for g in chosen)
    assert hashlib.sha256(rows.encode()).hexdigest() == RECORD["groups_sha256"]


def test_the_study_runs_the_preregistered_seeds_on_the_preregistered_domains():
    from components.study.domain import load_study, study_params

    params, study = load_study(ROOT / "params.yaml", "confirmation")
    params = study_params(params, study)
    seeds: dict[str, list[int]] = {}
    for arm in study.config.arms.values():
        seeds.setdefault(arm.family, []).append(arm.overrides["seed"])
    assert seeds == RECORD["seeds"]
    assert set(params.eval.domains) == {*RECORD["primary_domains"], "travel-*"}
