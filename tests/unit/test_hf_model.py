"""`model.source: hf`: a user's own model folder, here a second architecture (GPT-NeoX) built locally.

GPT-NeoX names its attention and MLP layers `query_key_value`, `dense`, `dense_h_to_4h`: a run on it
shows nothing is hard-wired to Llama/SmolLM2 (target modules, pad/eos, chat template).
"""

import json
import shutil

import pytest
from pydantic import ValidationError
from safetensors.torch import load_file

from components.config import LoraConfig, ModelConfig
from components.grpo.checkpoint import ADAPTER_DIR
from components.grpo.trainer import train
from components.hashing import files_sha256
from components.models.provision import ModelProvisionError, load_base_model, prepare_base_model, read_provenance
from components.models.standin import CHAT_TEMPLATE, EOS_TOKEN, save_standin_model
from tests.grpo_data import consistency_groups, tiny_params

NEOX_TARGETS = ["query_key_value", "dense"]


@pytest.fixture(scope="module")
def neox_dir(tiny_model_dir, tmp_path_factory):
    """The stand-in: a random GPT-NeoX chat model (SmolLM2's vocabulary, its own template, no pad token)."""
    return save_standin_model(tmp_path_factory.mktemp("hf") / "neox", heads=4, max_positions=512, vocabulary_from=tiny_model_dir)


def test_hf_folder_of_another_architecture_is_provisioned_with_provenance(neox_dir, tmp_path):
    cfg = ModelConfig(source="hf", path=neox_dir)
    provenance = prepare_base_model(cfg, tmp_path / "base", seed=0, lora_targets=NEOX_TARGETS)
    assert provenance.architecture == "GPTNeoXForCausalLM" and provenance.source == "hf"
    assert provenance.origin == str(neox_dir)
    assert provenance.origin_sha256 == files_sha256(sorted(neox_dir.glob("*.safetensors")))
    assert read_provenance(tmp_path / "base") == provenance
    model, tokenizer = load_base_model(tmp_path / "base")
    assert type(model).__name__ == "GPTNeoXForCausalLM"
    # the stand-in's own template and specials, not SmolLM2's ChatML (<|im_start|>, pad = eos = <|im_end|>)
    assert tokenizer.chat_template == CHAT_TEMPLATE and "<|im_start|>" not in tokenizer.chat_template
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    assert prompt == f"<|prompter|>Hi{EOS_TOKEN}<|assistant|>"
    # the folder has no pad token: provisioning pads with the model's own EOS (id 0 here, SmolLM2's is 2)
    assert json.loads((neox_dir / "tokenizer_config.json").read_text())["pad_token"] is None
    assert tokenizer.eos_token == tokenizer.pad_token == EOS_TOKEN
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == model.config.eos_token_id == 0
    assert model.generation_config.pad_token_id == 0
    # unchanged origin: the folder is reused, not rebuilt
    before = (tmp_path / "base" / "model.safetensors").stat().st_mtime_ns
    prepare_base_model(cfg, tmp_path / "base", seed=0)
    assert (tmp_path / "base" / "model.safetensors").stat().st_mtime_ns == before


def test_grpo_trains_a_lora_adapter_on_the_second_architecture(neox_dir, tmp_path):
    prepare_base_model(ModelConfig(source="hf", path=neox_dir), tmp_path / "base", seed=0, lora_targets=NEOX_TARGETS)
    params = tiny_params()
    params = params.model_copy(update={"lora": LoraConfig(target_modules=NEOX_TARGETS)})
    train(params, consistency_groups(3), tmp_path / "base", tmp_path / "ckpt", show_progress=False)
    weights = load_file(tmp_path / "ckpt" / ADAPTER_DIR / "adapter_model.safetensors")
    assert any("query_key_value.lora_B" in k for k in weights) and any("dense.lora_B" in k for k in weights)
    assert any(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)


def test_missing_lora_targets_are_named_with_the_modules_the_model_has(neox_dir, tmp_path):
    with pytest.raises(ModelProvisionError) as info:
        prepare_base_model(ModelConfig(source="hf", path=neox_dir), tmp_path / "base", seed=0, lora_targets=["q_proj", "dense"])
    message = str(info.value)
    assert "['q_proj']" in message and "query_key_value" in message and "dense_h_to_4h" in message
    assert not (tmp_path / "base").exists()  # nothing half-written


def test_a_model_without_chat_template_or_safetensors_is_refused(neox_dir, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(neox_dir, plain)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ModelProvisionError, match="no chat template"):
        prepare_base_model(ModelConfig(source="hf", path=plain), tmp_path / "a", seed=0)

    pickled = tmp_path / "pickled"
    shutil.copytree(neox_dir, pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(ModelProvisionError, match=r"no \*\.safetensors weights \(found \['pytorch_model.bin'\]\)"):
        prepare_base_model(ModelConfig(source="hf", path=pickled), tmp_path / "b", seed=0)


def test_model_id_is_taken_from_the_local_cache_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelProvisionError, match="not in the local Hugging Face cache.*hf download acme/chat-1b"):
        prepare_base_model(ModelConfig(source="hf", id="acme/chat-1b"), tmp_path / "base", seed=0)


def test_hf_source_names_exactly_one_model():
    with pytest.raises(ValidationError, match="exactly one of model.path"):
        ModelConfig(source="hf")
    with pytest.raises(ValidationError, match="exactly one of model.path"):
        ModelConfig(source="hf", path="a", id="b")
    with pytest.raises(ValidationError, match="read only with model.source 'hf'"):
        ModelConfig(path="a")
