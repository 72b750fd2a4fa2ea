"""The README's "Your own model and data" walkthrough, run as a user runs it: its bash block, read from
README.md, in bash, in a copy of the example project: the stand-in GPT-NeoX model built, the example
JSONL imported, validate, train, evaluate, register, promote, export, serve and a chat query with curl.
Only the port is changed (a free one for 8000). Then each step's output is checked.

Real everything: Great Expectations, the trainer, MLflow (SQLite), the merged export, vLLM's OpenAI
server. Only the weights are random and the budget tiny (the project's `demo` profile).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from mlflow import MlflowClient
from safetensors.torch import load_file
from transformers import AutoTokenizer

from components.config import load_params
from components.data import load_groups
from components.grpo.checkpoint import ADAPTER_DIR
from components.models.provision import read_provenance
from components.models.standin import CHAT_TEMPLATE, EOS_TOKEN
from tests.integration.servers import free_port
from tests.readme_walkthrough import PORT, ROOT, step_of, walkthrough_block, walkthrough_commands

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]
EXAMPLES = ROOT / "data" / "examples" / "groups.jsonl"


def run_walkthrough(block: str, cwd, log) -> int:
    """The block under `bash -euo pipefail` in its own process group; whatever it left running (the
    server, if a step failed before `kill`) is stopped with the group."""
    with log.open("w") as out:
        # a new user's shell: no tracking/registry URI that an earlier test's mlflow.set_*_uri left in os.environ
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
        shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, env=env)  # fmt: skip
        try:
            return shell.wait(timeout=1200)
        finally:
            try:
                os.killpg(shell.pid, 15)
            except ProcessLookupError:
                pass
            shell.wait(timeout=60)


def test_the_readme_walkthrough_runs_as_written(tmp_path):
    block, port = walkthrough_block(), free_port()
    local = block.replace(f"--port {PORT}", f"--port {port}").replace(f"127.0.0.1:{PORT}", f"127.0.0.1:{port}")
    assert str(PORT) not in local and local.count(str(port)) == block.count(str(PORT)) == 3
    project = tmp_path / walkthrough_commands(block)[0][1]  # `cd examples/own-model`: a copy of it
    project.mkdir(parents=True)
    shutil.copy2(ROOT / "examples" / "own-model" / "params.yaml", project / "params.yaml")
    (tmp_path / "data" / "examples").mkdir(parents=True)
    shutil.copy2(EXAMPLES, tmp_path / "data" / "examples" / "groups.jsonl")

    log = tmp_path / "walkthrough.log"
    returncode = run_walkthrough(local, tmp_path, log)
    output = log.read_text()
    assert returncode == 0, f"the README's walkthrough failed ({returncode}):\n{output[-6000:]}"
    params = load_params(project / "params.yaml")

    # 0. the stand-in: GPT-NeoX with its own template and no pad token
    standin = project / params.model.path
    assert json.loads((standin / "config.json").read_text())["architectures"] == ["GPTNeoXForCausalLM"]
    assert json.loads((standin / "tokenizer_config.json").read_text())["pad_token"] is None
    # 1-2. the user's groups, imported and validated, with the default objective's decision groups beside them
    rows = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]
    groups = load_groups(params.paths.groups)
    assert {g.group_id for g in groups if g.decision is None} == {r["group_id"] for r in rows}
    assert {g.domain for g in groups if g.decision is not None} == {"discrim_eval"} and params.train.decision_pairing.weight > 0
    # 3. the model provisioned with provenance; validated again (with its tokenizer)
    provenance = read_provenance(params.paths.base_model)
    assert provenance.source == "hf" and provenance.architecture == "GPTNeoXForCausalLM"
    assert json.loads((params.paths.validation / "report.json").read_text())["success"] is True
    # 4. trained on GPT-NeoX's layers, evaluated on the imported axis, registered and promoted
    adapter = load_file(params.paths.checkpoints / "latest" / ADAPTER_DIR / "adapter_model.safetensors")
    assert any("query_key_value.lora_B" in k for k in adapter) and any("dense.lora_B" in k for k in adapter)
    metrics = json.loads((params.paths.reports / "metrics.json").read_text())
    assert metrics["consistency"]["axis"] == "age"  # the imported axis, not a hard-coded gender
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    for alias in ("challenger", "champion"):
        assert str(client.get_model_version_by_alias(params.registry.model_name, alias).version) == "1"
    # 5. one merged folder with the stand-in's template and pad, and a model card
    exported = project / "export" / "my-chat-lora"
    assert json.loads((exported / "config.json").read_text())["architectures"] == ["GPTNeoXForCausalLM"]
    assert (exported / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    assert json.loads((exported / "tokenizer_config.json").read_text())["pad_token"] == EOS_TOKEN
    assert provenance.weights_sha256 in (exported / "README.md").read_text()
    # 6. served, and the chat query answered over HTTP
    assert f"serving {params.registry.model_name} version 1" in output
    found = re.search(r'\{"id":\s*"chatcmpl', output)
    assert found, f"no chat completion in the output:\n{output[-4000:]}"
    answer, _ = json.JSONDecoder().raw_decode(output, found.start())
    assert answer["object"] == "chat.completion" and answer["model"] == params.registry.model_name
    assert isinstance(answer["choices"][0]["message"]["content"], str) and answer["choices"][0]["message"]["content"]
    # the server applied the stand-in's template (<|prompter|>Hi<|endoftext|><|assistant|>: 4 tokens), not ChatML
    query = json.loads(next(words for words in walkthrough_commands(block) if step_of(words) == "curl")[-1])
    tokenizer = AutoTokenizer.from_pretrained(exported)
    prompt = tokenizer.apply_chat_template(query["messages"], add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|prompter|>")
    assert answer["usage"]["prompt_tokens"] == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
