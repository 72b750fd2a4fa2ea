"""dvc.yaml is the pipeline's one definition: the flow takes its stages and their order from it, every
stage runs a step the flow knows, and a groups file of one's own must be one of build's deps."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows import pipeline, steps
from flows.pipeline import PipelineError, check_declared, stages

ROOT = Path(__file__).resolve().parents[2]


def test_the_flow_runs_every_stage_of_dvc_yaml_after_the_stages_it_depends_on():
    declared = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    ordered = stages(ROOT)
    assert {s.name for s in ordered} == set(declared) and all(s.step in steps.STEPS for s in ordered)
    position = {s.name: i for i, s in enumerate(ordered)}
    for stage in ordered:  # every dep that is another stage's out comes from a stage that runs before
        for other in ordered:
            if any(pipeline._within(dep, out) for dep in stage.deps for out in other.outs) and other is not stage:
                assert position[other.name] < position[stage.name], (other.name, stage.name)
    assert [s.name for s in ordered] == list(declared)  # the file lists them in the order they run


def write(tmp_path: Path, stages_: dict) -> Path:
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages_}, sort_keys=False))
    return tmp_path


def test_order_follows_the_deps_not_the_file_and_a_cycle_or_a_foreign_command_is_refused(tmp_path):
    root = write(tmp_path, {"train": {"cmd": "groupwise train", "deps": ["data/groups/a.jsonl"], "outs": ["data/ckpt"]},
                            "build": {"cmd": "groupwise build", "deps": ["data/templates"], "outs": ["data/groups"]}})  # fmt: skip
    assert [s.name for s in stages(root)] == ["build", "train"]  # a dep inside another stage's out folder
    write(
        tmp_path,
        {"a": {"cmd": "groupwise build", "deps": ["x"], "outs": ["y"]}, "b": {"cmd": "groupwise train", "deps": ["y"], "outs": ["x"]}},
    )
    with pytest.raises(PipelineError, match="form a cycle"):
        stages(tmp_path)
    write(tmp_path, {"a": {"cmd": "python make.py", "outs": ["y"]}})
    with pytest.raises(PipelineError, match=r"dvc.yaml: stage 'a': cmd must be `groupwise <step>`"):
        stages(tmp_path)


def test_a_groups_file_of_ones_own_must_be_a_dep_of_build(tmp_path):
    root = write(tmp_path, {"build": {"cmd": "groupwise build", "deps": ["data/templates", "data/own"], "outs": ["data/groups"]}})
    check_declared(root, {"data.groups_file": None})
    check_declared(root, {"data.groups_file": Path("data/own/mine.jsonl")})  # inside a listed folder
    check_declared(root, {"data.groups_file": (root / "data/own/mine.jsonl").resolve()})  # absolute, inside the project
    with pytest.raises(PipelineError) as refused:
        check_declared(root, {"data.groups_file": Path("mine.jsonl")})
    assert str(refused.value) == (
        f"{root / 'dvc.yaml'}: the build stage does not list data.groups_file 'mine.jsonl' under its deps; add `- mine.jsonl` "
        "there, so that DVC reruns the stage when the file changes"
    )
    with pytest.raises(PipelineError):
        check_declared(root, {"data.groups_file": Path("data")})  # a parent of a dep is not declared by it
    with pytest.raises(PipelineError, match=r"data.groups_file '/elsewhere/mine.jsonl' is outside the project"):
        check_declared(root, {"data.groups_file": Path("/elsewhere/mine.jsonl")})


def test_the_instruction_families_file_must_be_a_dep_of_build_and_validate(tmp_path):
    """Both stages read it (build draws the instructions, validate judges the groups' families)."""
    stages_ = {
        "build": {"cmd": "groupwise build", "deps": ["data/templates", "data/instructions"], "outs": ["data/groups"]},
        "validate": {"cmd": "groupwise validate", "deps": ["data/groups"], "outs": ["data/validation/report.json"]},
    }
    root = write(tmp_path, stages_)
    families = {"paths.instruction_families": Path("data/instructions/families.yaml")}
    with pytest.raises(
        PipelineError, match=r"the validate stage does not list paths.instruction_families 'data/instructions/families.yaml'"
    ):
        check_declared(root, families)
    stages_["validate"]["deps"].append("data/instructions")
    check_declared(write(tmp_path, stages_), families)
    with pytest.raises(PipelineError, match=r"the build stage does not list paths.instruction_families 'mine.yaml'"):
        check_declared(root, {"paths.instruction_families": Path("mine.yaml")})


def test_the_projects_own_files_are_deps_of_the_stages_that_read_them():
    from components.config import load_params
    from flows.pipeline import user_files

    check_declared(ROOT, user_files(load_params(ROOT / "params.yaml")))
