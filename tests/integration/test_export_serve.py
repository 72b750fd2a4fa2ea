"""Serve and export what was registered: a merged model folder with a model card, an OpenAI-compatible
endpoint on 127.0.0.1 answering a real chat request over HTTP, and the pyfunc taking chat messages.

Real MLflow (SQLite), the real register step, the tiny random model in vLLM's CPU shape, the real
vLLM OpenAI server.
"""

from __future__ import annotations

import json

import mlflow
import pytest
from typer.testing import CliRunner

from components.config import load_params
from components.data.selection import training_groups
from components.generation.serve import chat
from components.hashing import file_sha256
from flows import steps
from flows.cli import app
from tests.integration.registry_helpers import good_metrics, registry_project, write_adapter, write_metrics
from tests.integration.servers import groupwise_serve

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]
NAME = "groupwise-smollm2-lora"
runner = CliRunner()


@pytest.fixture(scope="module")
def registered(tmp_path_factory, tiny_vllm_model_dir):
    project = registry_project(tmp_path_factory.mktemp("serve") / "project", tiny_vllm_model_dir)
    adapter = write_adapter(project, seed=1)
    write_metrics(project, good_metrics())
    params = load_params(project / "params.yaml")
    steps.build(params)  # the group files: the version records how many groups and prompts it trained on
    assert steps.register(params).metrics["version"] == "1"
    return project, params, adapter


def test_export_writes_a_merged_model_with_a_model_card(registered, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from components.models.lora import load_adapter
    from components.models.provision import load_base_model

    project, params, adapter = registered
    out = tmp_path / "export"
    result = runner.invoke(app, ["export", str(out), "--alias", "challenger", "--params", str(project / "params.yaml")])
    assert result.exit_code == 0, result.output
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "groupwise_export.json"} <= {p.name for p in out.iterdir()}
    card = (out / "README.md").read_text()
    base_sha = file_sha256(params.paths.base_model / "model.safetensors")
    assert base_sha in card and "| passed | true |" in card and f"models:/{NAME}/1" in card
    # what it was trained on and with, each gate's value, threshold and reason, and where its run is
    trained = training_groups(params.paths.groups, params.train)
    assert f"| training groups (train split, train.tasks / train.domains) | `{len(trained)}` |" in card and trained
    assert f"| training prompts (the groups' variants) | `{sum(len(g.members) for g in trained)}` |" in card
    for path, value in (("seed", params.seed), ("lora.r", params.lora.r), ("train.steps", params.train.steps),
                        ("train.samples_per_prompt", params.train.samples_per_prompt), ("model.source", params.model.source),
                        ("train.loss_type", params.train.loss_type), ("eval.max_new_tokens", params.eval.max_new_tokens)):  # fmt: skip
        assert f"| {path} | `{value}` |" in card
    assert "| gap_reduction | pass | 0.25 | 0 | gap_reduction: 0.25 >= 0.00 (tuned mean entropy gap 0.30 vs base 0.40) |" in card
    assert "| helpfulness | pass | -0.01 | 0.1 | helpfulness: drop -0.01 <= 0.10 " in card
    version = mlflow.MlflowClient(params.tracking.uri).get_model_version(NAME, "1")
    experiment = mlflow.MlflowClient(params.tracking.uri).get_run(version.run_id).info.experiment_id
    assert (f"| MLflow run | run `{version.run_id}`: `mlflow ui --backend-store-uri {params.tracking.uri}`, then "
            f"http://127.0.0.1:5000/#/experiments/{experiment}/runs/{version.run_id} |") in card  # fmt: skip
    assert json.loads((out / "groupwise_export.json").read_text())["base_weights_sha256"] == base_sha

    # the merged folder is the adapter on its base: same logits, loaded by plain transformers
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    base, tokenizer = load_base_model(params.paths.base_model)
    peft = load_adapter(base, adapter)
    ids = tokenizer(["What should I invest in?"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, peft(ids).logits, atol=1e-4)
        assert not torch.allclose(merged(ids).logits, load_base_model(params.paths.base_model)[0](ids).logits, atol=1e-4)

    again = runner.invoke(app, ["export", str(out), "--version", "1", "--params", str(project / "params.yaml")])
    assert again.exit_code == 2 and "exists and is not empty" in again.output
    missing = runner.invoke(app, ["export", str(tmp_path / "x"), "--alias", "nope", "--params", str(project / "params.yaml")])
    assert missing.exit_code == 2 and "no alias @nope" in missing.output and "Traceback" not in missing.output
    assert not (tmp_path / "x").exists()


def test_the_pyfunc_takes_chat_messages_as_well_as_strings(registered):
    from components.tracking.model_registry import load_verified

    _, params, _ = registered
    mlflow.set_tracking_uri(params.tracking.uri)
    mlflow.set_registry_uri(params.tracking.uri)
    model = load_verified(f"models:/{NAME}@challenger")
    as_text = model.predict(["Name a colour."], params={"max_new_tokens": 6})
    as_chat = model.predict([json.dumps([{"role": "user", "content": "Name a colour."}])], params={"max_new_tokens": 6})
    assert as_chat == as_text
    with_system = model.predict(
        [json.dumps([{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Name a colour."}])],
        params={"max_new_tokens": 6},
    )
    assert isinstance(with_system[0], str)


def test_serve_answers_a_chat_request_over_http_and_stops(registered, tmp_path):
    project, params, _ = registered
    with groupwise_serve(project / "params.yaml", "challenger", tmp_path / "serve.log") as url:
        answer = chat(url, NAME, [{"role": "user", "content": "What should I invest in?"}], max_tokens=8, temperature=0.0)
        assert isinstance(answer, str) and answer
        assert (params.paths.exports / f"{NAME}-v1" / "model.safetensors").is_file()  # served from the merged export
