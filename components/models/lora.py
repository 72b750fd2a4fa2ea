"""LoRA adapters with peft (Hu et al. 2021): W' = W + (alpha / r) B A, only A and B trained."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from components.config import LoraConfig
from components.contracts.checkpoint import ADAPTER_WEIGHTS
from components.contracts.errors import UserError

if TYPE_CHECKING:
    import torch


class AdapterError(UserError, ValueError):
    """A folder given as a LoRA adapter is not a usable one (the message names the file and why)."""


class AdapterNotFoundError(AdapterError, FileNotFoundError):
    """A folder given as a LoRA adapter lacks the adapter's files."""


def attach_lora(model, cfg: LoraConfig):
    """Wrap `model` in a fresh trainable LoRA adapter (B = 0, so the policy starts at the base);
    the target modules are checked against the model's first (`ModelProvisionError` names those it has)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    from components.models.provision import check_lora_targets

    check_lora_targets(model, list(cfg.target_modules), f"model {type(model).__name__}")
    peft_cfg = PeftLoraConfig(
        r=cfg.r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_cfg)


class InitAdapterError(UserError, ValueError):
    """`train.init_adapter` is not an adapter this model and lora section can start from."""


def initialise_adapter(model, checkpoint: Path) -> dict:
    """Copy a saved adapter's LoRA weights (a checkpoint folder with adapter/, or the adapter
    folder itself) into `model`'s fresh adapter (`attach_lora`): training continues from it.
    Returns the LoRA tensors read (the start of a `train.reference: start` run)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from components.contracts.checkpoint import ADAPTER_DIR, adapter_files

    folder = Path(checkpoint)
    folder = folder / ADAPTER_DIR if (folder / ADAPTER_DIR).is_dir() else folder
    _, weights = adapter_files(folder)
    if not weights.is_file():
        raise InitAdapterError(f"train.init_adapter: {weights} is missing (train the adapter it names first)")
    try:
        state = load_file(weights)
        result = set_peft_model_state_dict(model, state)
    except RuntimeError as exc:  # shape mismatch: another lora.r or model
        raise InitAdapterError(f"train.init_adapter: {weights} does not fit this model and lora section ({exc})") from exc
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        raise InitAdapterError(
            f"train.init_adapter: {weights} does not match the lora section (missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]})"
        )
    return state


def load_adapter(model, adapter_dir: Path):
    """Put a saved LoRA adapter (safetensors) on a base model, for inference."""
    from peft import PeftModel

    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        raise AdapterNotFoundError(f"{adapter_dir}: no {ADAPTER_WEIGHTS} (not a LoRA checkpoint)")
    peft_model = PeftModel.from_pretrained(model, adapter_dir, is_trainable=False, use_safetensors=True)
    peft_model.eval()
    return peft_model


def merge_adapter(base_model_dir: Path, adapter_dir: Path, out_dir: Path, dtype: str = "float32") -> Path:
    """Base + adapter merged into plain weights (peft `merge_and_unload`: W ← W + (α/r)·B·A), saved as safetensors.

    The merge is done in fp32, then the weights are cast to `dtype`. The folder holds a complete
    transformers model (config.json, model.safetensors), so any engine can serve it without LoRA.
    """
    import torch

    from components.models.provision import load_base_model

    model, _ = load_base_model(Path(base_model_dir), "float32")
    merged = load_adapter(model, Path(adapter_dir)).merge_and_unload()
    merged = merged.to(getattr(torch, dtype))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, safe_serialization=True)
    return Path(out_dir)


@contextmanager
def lora_merged(model):
    """The peft model with its LoRA deltas merged into the base weights (W + (α/r)·B·A) for the
    duration, then the exact original base weights restored (no rounding drift across steps).

    Decoding token by token is dominated by per-layer overhead on a CPU: merged, each adapted
    projection is one matmul instead of three, and the forward is the base model's.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    saved = [m.get_base_layer().weight.detach().clone() for m in layers]
    model.merge_adapter()
    try:
        yield model
    finally:
        model.unmerge_adapter()
        with torch.no_grad():
            for layer, weight in zip(layers, saved):
                layer.get_base_layer().weight.copy_(weight)


def merged_weights(model, dtype: str | None = None, full: bool = False) -> list[tuple[str, "torch.Tensor"]]:
    """(Hugging Face name, W + (α/r)·B·A) for every LoRA-adapted weight of a peft model, computed in
    fp32 and cast to `dtype`, without touching the model; `full`: every other base weight too.

    What a running inference engine needs after an update: only the adapted projections change.
    """
    import torch
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    out: list[tuple[str, torch.Tensor]] = []
    adapted: set[str] = set()
    target = getattr(torch, dtype) if dtype else None
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, LoraLayer):
                continue
            base = module.get_base_layer()
            weight = base.weight.detach().float().clone()
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    weight += module.get_delta_weight(adapter).float()
            hf_name = f"{name.removeprefix(prefix)}.weight"
            adapted.add(hf_name)
            out.append((hf_name, weight.to(target) if target is not None else weight))
        if full:
            for name, param in model.named_parameters():
                if "lora_" in name:
                    continue
                hf_name = name.removeprefix(prefix).replace(".base_layer.", ".")
                if hf_name not in adapted:
                    out.append((hf_name, param.detach().to(target) if target is not None else param.detach().clone()))
    return out
