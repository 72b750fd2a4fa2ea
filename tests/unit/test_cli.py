"""The `groupwise` CLI: help on every subcommand, and bad input as one clear line with exit code 2."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from flows.cli import app
from tests.conftest import ROOT, make_project

runner = CliRunner()
SUBCOMMANDS = [
    "build", "validate", "prepare-model", "train", "evaluate", "register", "retrain", "show-params",
    "promote", "rollback", "versions", "schedule",
]  # fmt: skip


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_help(command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "--params" in result.output and "--profile" in result.output


def test_misspelt_loss_type_fails_at_load_naming_field_and_known_names(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"train": {"loss_type": "grpoo"}}))
    result = runner.invoke(app, ["show-params", "--params", str(path)])
    assert result.exit_code == 2
    assert "train.loss_type" in result.output and "grpoo" in result.output and "dr_grpo" in result.output


def test_show_params_applies_profile(tmp_path):
    project = make_project(tmp_path / "p", "default")
    result = runner.invoke(app, ["show-params", "--params", str(project / "params.yaml"), "--profile", "tiny"])
    assert result.exit_code == 0
    shown = json.loads(result.stdout)
    assert shown["profile"] == "tiny" and shown["model"]["source"] == "tiny"


def test_own_model_example_with_the_default_profile_shows_whole_answers(tmp_path, monkeypatch):
    """A params file of one's own with `profile: default` gets the measured defaults (components/config/)."""
    monkeypatch.delenv("GROUPWISE_PROFILE", raising=False)  # the file's own `profile` key decides
    example = ROOT / "examples" / "own-model" / "params.yaml"
    own = tmp_path / "params.yaml"
    text = example.read_text()
    assert text.count("\nprofile: demo ") == 1
    own.write_text(text.replace("\nprofile: demo ", "\nprofile: default "))
    for args in (["--params", str(example), "--profile", "default"], ["--params", str(own)]):
        result = runner.invoke(app, ["show-params", *args])
        assert result.exit_code == 0, result.output
        shown = json.loads(result.stdout)
        assert shown["profile"] == "default" and shown["model"]["source"] == "hf"
        assert (shown["train"]["max_new_tokens"], shown["eval"]["max_new_tokens"]) == (512, 512)
        assert shown["reward"]["entropy_scope"] == "window"
        assert shown["data"]["answer_instruction"] == "Answer in at most three sentences."
        assert (shown["train"]["temperature"], shown["eval"]["temperature"], shown["data"]["heldout_fraction"]) == (0.7, 0.7, 0.4)


def test_validate_names_file_rule_and_row_of_a_broken_group(tmp_path):
    project = make_project(tmp_path / "p", "tiny")
    params = str(project / "params.yaml")
    assert runner.invoke(app, ["build", "--params", params]).exit_code == 0
    path = project / "data/groups/consistency.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[2]["members"] = rows[2]["members"][:1]  # one variant left: axis not covered, < 2 members
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    result = runner.invoke(app, ["validate", "--params", params])
    assert result.exit_code == 2
    assert "consistency.jsonl" in result.output and "rule 'consistency_" in result.output
    assert f"line 3 (group_id={rows[2]['group_id']}" in result.output
    assert json.loads((project / "data/validation/report.json").read_text())["success"] is False


def test_set_overrides_params_for_one_run_and_bad_assignments_exit_2(tmp_path):
    project = make_project(tmp_path / "p", "default")
    params = str(project / "params.yaml")
    result = runner.invoke(app, ["show-params", "-p", params, "-S", "train.rollout.engine=vllm", "--set", "train.steps=3"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["train"]["rollout"]["engine"] == "vllm" and shown["train"]["steps"] == 3
    assert shown["train"]["lr"] == 3e-4  # the rest as in params.yaml
    bad_value = runner.invoke(app, ["show-params", "-p", params, "-S", "train.rollout.engine=vlm"])
    assert bad_value.exit_code == 2 and "train.rollout.engine" in bad_value.output and "vlm" in bad_value.output
    for bad in ("train.steps", "=3", "train..steps=3"):
        result = runner.invoke(app, ["train", "-p", params, "-S", bad])
        assert result.exit_code == 2 and "expected KEY=VALUE" in result.output, bad


def test_a_step_run_by_dvc_refuses_what_dvc_lock_could_not_record(tmp_path, monkeypatch):
    """Inside a DVC stage (DVC_STAGE set), `groupwise build` refuses a groups file of one's own that the
    build stage does not list under its deps, and any step refuses --set, each in one line with exit 2,
    before anything is written."""
    project = make_project(tmp_path / "p", "tiny", {"data.groups_file": "data/mine.jsonl"})
    (project / "data" / "mine.jsonl").write_text((ROOT / "data" / "examples" / "groups.jsonl").read_text())
    monkeypatch.setenv("DVC_STAGE", "build")
    result = runner.invoke(app, ["build", "--params", str(project / "params.yaml")])
    assert result.exit_code == 2 and "does not list data.groups_file 'data/mine.jsonl' under its deps" in result.output
    assert not (project / "data" / "groups").exists()
    result = runner.invoke(app, ["validate", "--params", str(project / "params.yaml"), "-S", "seed=7"])
    assert result.exit_code == 2 and "--set seed=7 inside DVC stage 'build'" in result.output and "dvc exp run -S seed=7" in result.output
    monkeypatch.delenv("DVC_STAGE")
    declared = (project / "dvc.yaml").read_text().replace("      - data/templates ", "      - data/mine.jsonl\n      - data/templates ", 1)
    (project / "dvc.yaml").write_text(declared)
    monkeypatch.setenv("DVC_STAGE", "build")
    result = runner.invoke(app, ["build", "--params", str(project / "params.yaml")])
    assert result.exit_code == 0, result.output
    assert (project / "data" / "groups").is_dir()


def test_evaluate_without_checkpoint_says_what_is_missing(tmp_path, tiny_model_dir):
    project = make_project(tmp_path / "p", "tiny")
    params = str(project / "params.yaml")
    assert runner.invoke(app, ["build", "--params", params]).exit_code == 0
    from tests.conftest import seed_tiny_model

    seed_tiny_model(project, tiny_model_dir)
    result = runner.invoke(app, ["evaluate", "--params", params])
    assert result.exit_code == 2
    assert "missing checkpoint" in result.output


def test_schedule_without_a_prefect_server_says_how_to_start_one(tmp_path):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    project = make_project(tmp_path / "p", "tiny")
    with temporary_settings(restore_defaults={PREFECT_API_URL}):  # no server, whatever the session set
        result = runner.invoke(app, ["schedule", "--params", str(project / "params.yaml")])
    assert result.exit_code == 2
    assert "scheduling needs a Prefect server" in result.output and "PREFECT_API_URL" in result.output


def test_retrain_takes_set_overrides_and_a_misspelt_key_stops_it_before_any_server(tmp_path):
    project = make_project(tmp_path / "p", "default")
    result = runner.invoke(app, ["retrain", "-p", str(project / "params.yaml"), "-S", "train.lrr=1e-5"])
    assert result.exit_code == 2 and "train.lrr: unknown key; did you mean train.lr?" in result.output
    assert "prefect" not in result.output.lower()  # refused before the flow (and its API server) started


def test_the_cli_sets_what_make_sets_unless_the_environment_has_it():
    """`groupwise` run directly behaves as under `make`: the Makefile's exports are the CLI's defaults."""
    import os
    import re
    import subprocess
    import sys

    from flows import RUNTIME_DEFAULTS

    makefile = (ROOT / "Makefile").read_text()
    exported = dict(re.findall(r"^export (\w+) := (\S+)$", makefile, re.MULTILINE))
    assert {k: v for k, v in exported.items() if k in RUNTIME_DEFAULTS} == RUNTIME_DEFAULTS
    env = {k: v for k, v in os.environ.items() if k not in RUNTIME_DEFAULTS} | {"TOKENIZERS_PARALLELISM": "true"}
    code = "import flows, os, json; print(json.dumps({k: os.environ[k] for k in flows.RUNTIME_DEFAULTS}))"
    shown = json.loads(subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    assert shown == RUNTIME_DEFAULTS | {"TOKENIZERS_PARALLELISM": "true"}


def test_make_echoes_no_recipe_line_so_the_first_line_a_newcomer_sees_is_groupwise_s():
    """Every recipe line of the Makefile starts with `@` (make prints none of them); the install says
    what it does in its own `groupwise:` lines."""
    import re

    makefile = (ROOT / "Makefile").read_text()
    body = re.sub(r"^define .*?^endef$", "", makefile, flags=re.MULTILINE | re.DOTALL)  # a macro's lines run inside @ lines
    recipe_lines = re.findall(r"^\t(.*)$", body, re.MULTILINE)
    assert recipe_lines and [line for line in recipe_lines if not line.startswith("@")] == []
    install = body[body.index("$(VENV)/.installed:") :]
    assert re.search(r'^\t@echo "groupwise: ', install, re.MULTILINE)


def test_the_environment_holds_the_bytecode_of_the_heavy_packages_so_no_process_compiles_them():
    """`make setup` installs with `--compile-bytecode`: each CLI stage and each vLLM engine process imports
    torch, transformers and vllm from their .pyc files, also where PYTHONDONTWRITEBYTECODE is set (there,
    without them, every process compiled ~7,800 files again: 18 s of a 45 s `groupwise prepare-model`)."""
    import importlib.util
    from pathlib import Path

    assert "--compile-bytecode" in (ROOT / "Makefile").read_text()
    missing = []
    for name in ("torch", "transformers", "mlflow", "vllm", "great_expectations", "prefect"):
        spec = importlib.util.find_spec(name)
        if spec is None or "site-packages" not in (spec.origin or ""):
            continue  # not installed here, or from a source tree
        origin = Path(spec.origin)
        cached = Path(importlib.util.cache_from_source(str(origin)))
        if not cached.is_file():
            missing.append(f"{name}: {cached}")
    assert not missing, "installed without bytecode (make setup compiles it): " + ", ".join(missing)


def test_versions_on_an_empty_registry_says_how_to_get_one(tmp_path):
    project = make_project(tmp_path / "p", "default")
    result = runner.invoke(app, ["versions", "-p", str(project / "params.yaml")])
    assert result.exit_code == 0 and "is registered in" in result.output and "groupwise retrain" in result.output
