"""The README's "Your own model and data" walkthrough agrees with the CLI and with the example project
it runs in (tests/integration/test_own_model_flow.py runs it)."""

import json
from pathlib import Path

import pytest
import typer
from typer.exceptions import TyperException

from components.config import load_params
from components.models.standin import LORA_TARGETS
from flows.cli import app
from tests.readme_walkthrough import ROOT, step_of, walkthrough_block, walkthrough_commands

STEPS = ["cd", "python", "prepare-benchmarks", "import", "prepare-model", "validate", "train", "evaluate", "register", "promote",
         "export", "serve", "until", "curl", "kill"]  # fmt: skip


@pytest.fixture(scope="module")
def commands() -> list[list[str]]:
    return walkthrough_commands(walkthrough_block())


def test_the_walkthrough_takes_every_step_in_order(commands):
    assert [step_of(words) for words in commands] == STEPS


def test_every_groupwise_command_of_the_walkthrough_is_one_the_cli_takes(commands):
    """Each command's arguments parsed by the CLI itself (nothing runs): an unknown flag fails here."""
    cli = typer.main.get_command(app)
    parsed = {}
    for words in commands:
        if words[0] == "groupwise":
            args = [w for w in words[2:] if w != "&"]  # `&`: the shell's, run in the background
            parsed[words[1]] = cli.commands[words[1]].make_context(words[1], args).params
    assert all(p["params"] == Path("params.yaml") for p in parsed.values())  # the project's, from its folder
    assert parsed["promote"]["version"] == "1" and not parsed["promote"]["force"]
    assert parsed["serve"]["alias"] == parsed["export"]["alias"] == "champion" and parsed["serve"]["port"] == 8000
    with pytest.raises(TyperException, match="No such option: --champion"):  # the check bites
        cli.commands["promote"].make_context("promote", ["--champion", "1"])


def test_the_walkthrough_project_names_the_model_it_builds_imports_and_serves(commands):
    by_step = {step_of(words): words for words in commands}
    project = ROOT / by_step["cd"][1]
    params = load_params(project / "params.yaml")
    assert by_step["python"][:3] == ["python", "-m", "components.models.standin"]
    assert params.model.source == "hf" and params.model.path == Path(by_step["python"][3])
    assert params.lora.target_modules == LORA_TARGETS
    assert (project / by_step["import"][2]).resolve() == ROOT / "data" / "examples" / "groups.jsonl"
    assert by_step["register"][2:] == [] and params.registry.alias == "challenger"
    champion = params.registry.champion_alias
    assert by_step["export"][2:4] == by_step["serve"][2:4] == ["--alias", champion]
    assert json.loads(by_step["curl"][-1])["model"] == params.registry.model_name


def test_the_walkthrough_gates_are_the_demo_profile_and_the_default_ones_are_params_yaml(commands):
    project = ROOT / commands[0][1]
    demo, default = load_params(project / "params.yaml"), load_params(project / "params.yaml", "default")
    assert demo.profile == "demo" and not demo.gate.require_significance
    assert default.gate == load_params(ROOT / "params.yaml", "default").gate  # "with a real model: the default gates"
    assert default.eval.engine == "vllm" and demo.eval.engine == "transformers"
