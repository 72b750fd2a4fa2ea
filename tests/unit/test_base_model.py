"""Finding a registered version's base model on another machine (components/tracking/base_model.py):
here, a `model.source: hf` base named by id, found again in the local Hugging Face cache."""

import json
import shutil

import huggingface_hub.constants
import pytest
from safetensors.torch import load_file, save_file

from components.config import ModelConfig
from components.hashing import file_sha256
from components.models.provision import PROVENANCE_FILE, load_base_model, prepare_base_model
from components.models.standin import LORA_TARGETS, save_standin_model
from components.tracking.base_model import BaseModelNotFoundError, locate_base_model, provisioned_bases_dir

MODEL_ID = "acme/chat-1b"
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_snapshot(tmp_path, monkeypatch, tiny_model_dir):
    """A local HF cache in tmp_path holding the stand-in as acme/chat-1b, laid out as huggingface_hub
    lays it out (`models--acme--chat-1b/refs/main` naming the revision of `snapshots/<revision>/`)."""
    cache = tmp_path / "hub"
    repo = cache / f"models--{MODEL_ID.replace('/', '--')}"
    snapshot = save_standin_model(repo / "snapshots" / REVISION, heads=4, max_positions=512, vocabulary_from=tiny_model_dir)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))  # huggingface_hub reads it at import
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # where the provisioned copy goes
    return snapshot


def registered_elsewhere(tmp_path):
    """Provision acme/chat-1b on "machine A" and keep only the version's provenance file: on "machine B"
    the folder it was registered from does not exist."""
    base = tmp_path / "machine-a" / "base"
    provenance = prepare_base_model(ModelConfig(source="hf", id=MODEL_ID), base, seed=0, lora_targets=LORA_TARGETS)
    recorded = tmp_path / "version" / PROVENANCE_FILE
    recorded.parent.mkdir()
    shutil.copy2(base / PROVENANCE_FILE, recorded)
    shutil.rmtree(base.parent)
    return provenance, recorded, base


def test_a_version_moved_to_another_machine_finds_its_base_in_the_local_hf_cache(hf_snapshot, tmp_path):
    provenance, recorded, base = registered_elsewhere(tmp_path)
    assert provenance.origin == MODEL_ID
    found = locate_base_model(provenance.weights_sha256, recorded=str(base), provenance_file=recorded)
    assert found == provisioned_bases_dir() / provenance.weights_sha256 and found.is_relative_to(tmp_path / "xdg")
    assert file_sha256(found / "model.safetensors") == provenance.weights_sha256
    model, tokenizer = load_base_model(found)
    assert type(model).__name__ == "GPTNeoXForCausalLM" and tokenizer.chat_template
    # the provisioned copy is reused, and checked again
    before = (found / "model.safetensors").stat().st_mtime_ns
    assert locate_base_model(provenance.weights_sha256, provenance_file=recorded) == found
    assert (found / "model.safetensors").stat().st_mtime_ns == before
    # without the provenance (the id) the cache is not a candidate
    with pytest.raises(BaseModelNotFoundError, match="no candidate folder"):
        locate_base_model(provenance.weights_sha256)


def test_other_weights_under_the_same_id_are_passed_over(hf_snapshot, tmp_path):
    provenance, recorded, _ = registered_elsewhere(tmp_path)
    weights = load_file(hf_snapshot / "model.safetensors")
    name = next(iter(weights))
    weights[name] = weights[name] + 1.0  # the cache now holds other weights under the same id
    save_file(weights, hf_snapshot / "model.safetensors", metadata={"format": "pt"})
    expected = rf"Hugging Face cache \({MODEL_ID}\): .*origin SHA-256 .*, not {provenance.origin_sha256[:12]}"
    with pytest.raises(BaseModelNotFoundError, match=expected):
        locate_base_model(provenance.weights_sha256, provenance_file=recorded)
    assert not provisioned_bases_dir().exists()  # nothing provisioned from the wrong weights


def test_a_provisioned_copy_with_other_bytes_is_passed_over(hf_snapshot, tmp_path):
    """As when another transformers version writes the same weights differently: named, not taken."""
    _, recorded, _ = registered_elsewhere(tmp_path)
    expected = rf"Hugging Face cache \({MODEL_ID}\): provisioned into .*: SHA-256 .*, not 000000000000"
    with pytest.raises(BaseModelNotFoundError, match=expected):
        locate_base_model("0" * 64, provenance_file=recorded)


def test_a_base_from_a_folder_is_not_looked_up_in_the_hf_cache(tmp_path):
    recorded = tmp_path / PROVENANCE_FILE
    recorded.write_text(json.dumps({"source": "hf", "origin": "/models/my-chat-1b", "weights_sha256": "ab" * 32}))
    with pytest.raises(BaseModelNotFoundError) as info:
        locate_base_model("ab" * 32, provenance_file=recorded)
    assert "Hugging Face cache" not in str(info.value) and "no candidate folder" in str(info.value)
