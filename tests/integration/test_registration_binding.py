"""Registration publishes the adapter that was evaluated, or nothing (issue: integrity).

Real MLflow (SQLite), the real register step and CLI, the tiny model. Each fault below was seen:
a stale metrics.json registered a different adapter, a truncated adapter registered a version that
could not load, and a changed base model still loaded because only recorded hashes were compared.
"""

from __future__ import annotations

import json

import mlflow
import pytest
import yaml
from mlflow import MlflowClient
from typer.testing import CliRunner

from components.config import load_params
from components.release.binding import BindingError, check_adapter_loads
from flows import steps
from flows.cli import app
from tests.integration.registry_helpers import good_metrics, registry_project, write_adapter, write_metrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
NAME = "groupwise-smollm2-lora"


def greedy(params, prompts: list[str], adapter) -> list[str]:
    """8 greedy tokens per prompt straight from transformers (+ peft), as a user would check by hand."""
    import torch

    from components.generation.sampling import chat_prompt
    from components.models.lora import load_adapter
    from components.models.provision import load_base_model

    model, tokenizer = load_base_model(params.paths.base_model, "float32")
    if adapter is not None:
        model = load_adapter(model, adapter)
    tokenizer.padding_side = "left"
    enc = tokenizer([chat_prompt(tokenizer, p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    width = enc["input_ids"].shape[1]
    return [tokenizer.decode(seq[width:], skip_special_tokens=True).strip() for seq in out]


def versions(params) -> list:
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    return client.search_model_versions(f"name = '{NAME}'") if client.search_registered_models() else []


@pytest.fixture
def project(tmp_path, tiny_model_dir):
    project = registry_project(tmp_path / "p", tiny_model_dir)
    write_adapter(project, seed=1)
    write_metrics(project, good_metrics())  # vouches for adapter seed 1
    return project


def test_stale_metrics_of_another_adapter_register_nothing(project):
    params = load_params(project / "params.yaml")
    write_adapter(project, seed=2)  # retrained since the evaluation
    with pytest.raises(BindingError, match=r"nothing registered: .*metrics.json is not the evaluation .*the adapter \(retrained"):
        steps.register(params)
    assert versions(params) == []


def test_metrics_without_a_binding_register_nothing(project):
    params = load_params(project / "params.yaml")
    write_metrics(project, good_metrics(), bind=False)  # e.g. restored from git, written by hand
    with pytest.raises(BindingError, match="records no evaluated files"):
        steps.register(params)
    assert versions(params) == []


def test_other_evaluation_params_register_nothing(project):
    text = (project / "params.yaml").read_text()
    data = yaml.safe_load(text)
    data["eval"]["temperature"] = 0.3  # the file lists the tiny profile's values (make_project writes it in)
    (project / "params.yaml").write_text(yaml.safe_dump(data))
    params = load_params(project / "params.yaml")
    with pytest.raises(BindingError, match=r"the evaluation params \(data, eval, model, reward, seed"):
        steps.register(params)
    # gates and registry params are not part of what was evaluated: changing them is allowed
    data["eval"]["temperature"] = yaml.safe_load(text)["eval"]["temperature"]
    data["gate"]["champion_max_gap_increase"] = 5.0
    (project / "params.yaml").write_text(yaml.safe_dump(data))
    assert steps.register(load_params(project / "params.yaml")).metrics["version"] == "1"


def test_truncated_adapter_registers_nothing_and_the_cli_says_so_in_one_line(project):
    params = load_params(project / "params.yaml")
    weights = params.paths.checkpoints / "latest" / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20_000])
    with pytest.raises(BindingError, match="the adapter does not load"):
        check_adapter_loads(weights.parent)
    result = CliRunner().invoke(app, ["register", "--params", str(project / "params.yaml")])
    assert result.exit_code == 2, result.output
    assert "adapter_model.safetensors: the adapter does not load" in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert versions(params) == []


def test_a_version_refuses_to_load_on_other_base_weights(project, tiny_model_dir):
    params = load_params(project / "params.yaml")
    registered = steps.register(params)
    assert registered.metrics["version"] == "1"
    uri = f"models:/{NAME}/1"
    mlflow.set_tracking_uri(params.tracking.uri)
    mlflow.set_registry_uri(params.tracking.uri)
    # the registered model answers as the adapter does when applied directly, and not as the base model
    prompts = ["What should I invest in?", "Name a colour."]
    served = mlflow.pyfunc.load_model(uri).predict(prompts, params={"max_new_tokens": 8})
    assert served == greedy(params, prompts, adapter=params.paths.checkpoints / "latest" / "adapter")
    assert served != greedy(params, prompts, adapter=None)
    # same file name, same recorded provenance, other weights: the actual SHA-256 is checked
    weights = params.paths.base_model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    provenance = json.loads((params.paths.base_model / "groupwise_model.json").read_text())
    assert provenance["weights_sha256"]  # still claims the old hash
    with pytest.raises(
        Exception, match=r"the base model the adapter was trained on .* is not here: the folder it was registered from .*: SHA-256 \w+, not"
    ):
        mlflow.pyfunc.load_model(uri)


def test_a_tampered_version_refuses_to_load(project):
    from components.tracking.manifest import MANIFEST_DIGEST_TAG, ManifestError
    from components.tracking.model_registry import load_verified

    params = load_params(project / "params.yaml")
    steps.register(params)
    client = MlflowClient(tracking_uri=params.tracking.uri, registry_uri=params.tracking.uri)
    assert MANIFEST_DIGEST_TAG in client.get_model_version(NAME, "1").tags
    mlflow.set_tracking_uri(params.tracking.uri)
    mlflow.set_registry_uri(params.tracking.uri)
    assert isinstance(load_verified(f"models:/{NAME}@challenger").predict(["Hi"], params={"max_new_tokens": 2})[0], str)
    # whoever can write the artifact store changes the code the version runs
    stored = next(params.tracking.artifact_location.rglob("code/components/tracking/pyfunc_model.py"))
    stored.write_text(stored.read_text() + "\nimport os  # injected\n")
    with pytest.raises(ManifestError, match=r"version 1: files differ .* changed \['code/components/tracking/pyfunc_model.py'\]"):
        load_verified(f"models:/{NAME}/1")


def test_base_model_lookup_recorded_folder_env_var_and_packaged(tmp_path, tiny_model_dir, monkeypatch):
    import shutil

    monkeypatch.delenv("GROUPWISE_BASE_MODEL_DIR", raising=False)
    packaged = registry_project(tmp_path / "packaged", tiny_model_dir, {"registry.package_base_model": True})
    plain = registry_project(tmp_path / "plain", tiny_model_dir)
    uris = {}
    for name, project in (("packaged", packaged), ("plain", plain)):
        write_adapter(project, seed=1)
        write_metrics(project, good_metrics())
        params = load_params(project / "params.yaml")
        steps.register(params)
        uris[name] = (params, f"models:/{NAME}/1")
    for params, _ in uris.values():  # the recorded base folders are gone (another machine, a clean-up)
        shutil.move(params.paths.base_model, tmp_path / f"moved-{params.root.name}")
    params, uri = uris["packaged"]
    mlflow.set_tracking_uri(params.tracking.uri)
    mlflow.set_registry_uri(params.tracking.uri)
    assert isinstance(mlflow.pyfunc.load_model(uri).predict(["Hi"], params={"max_new_tokens": 2})[0], str)
    params, uri = uris["plain"]
    mlflow.set_tracking_uri(params.tracking.uri)
    mlflow.set_registry_uri(params.tracking.uri)
    with pytest.raises(
        Exception,
        match=r"the base model the adapter was trained on .* is not here: the folder it was registered from .*: no model.safetensors; set GROUPWISE_BASE_MODEL_DIR",
    ):
        mlflow.pyfunc.load_model(uri)
    monkeypatch.setenv("GROUPWISE_BASE_MODEL_DIR", str(tmp_path / "moved-plain"))
    assert isinstance(mlflow.pyfunc.load_model(uri).predict(["Hi"], params={"max_new_tokens": 2})[0], str)
