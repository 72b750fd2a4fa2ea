"""Atomic checkpoints: everything is written to a temporary sibling folder, then renamed.

A reader never sees a half-written checkpoint: either the old folder or the complete new one. The
layout (folder and file names) is the contract `components.contracts.checkpoint`; its names are
re-exported here.

Final checkpoint (the DVC output): `adapter/` (peft: adapter_config.json +
adapter_model.safetensors), `train_state.json`, `train_log.csv` (one row per step, a DVC plot).

Resumable state (`<checkpoints>/resume/step-NNNNNN/`, newest only): the same adapter plus
`optimizer.safetensors` (flattened AdamW + scheduler state), `rng.json` (python, numpy and torch
RNG states), `progress.json` (step = data cursor, samples, seconds, metric history, the fingerprint
of the configuration it belongs to). Tensors go through safetensors and JSON: no pickle is loaded.
"""

from __future__ import annotations

import base64
import csv
import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from components.contracts.atomic import atomic_dir
from components.contracts.checkpoint import (
    ADAPTER_DIR,
    ADAPTER_WEIGHTS,
    LOG_FILE,
    OPTIMIZER_FILE,
    OPTIMIZER_STRUCTURE_FILE,
    PROGRESS_FILE,
    RNG_FILE,
    STATE_FILE,
    STEP_PREFIX,
    latest_train_state,
    read_state,
    recover_checkpoint,
    resume_state_name,
    step_folders,
)

STATE_PREFIX = STEP_PREFIX  # the name it had here


def _write_log(path: Path, log_rows: list[dict[str, float]]) -> None:
    if not log_rows:
        return
    fields = list(dict.fromkeys(k for row in log_rows for k in row))
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(log_rows)


def save_checkpoint(out_dir: Path, model, state: dict[str, Any], log_rows: list[dict[str, float]]) -> Path:
    """The final adapter checkpoint, atomically."""

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp / ADAPTER_DIR, safe_serialization=True)
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True))
        _write_log(tmp / LOG_FILE, log_rows)

    return atomic_dir(out_dir, write)


# ---- resumable training state ---------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    py = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(state["torch"])), dtype=torch.uint8))


def _flatten(prefix: str, obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Tensors of a (nested) state dict go to `tensors`; the rest stays as JSON with references."""
    if isinstance(obj, torch.Tensor):
        key = f"{prefix}"
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        return {"__dict__": [[k, _flatten(f"{prefix}.{k}", v, tensors)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [_flatten(f"{prefix}.{i}", v, tensors) for i, v in enumerate(obj)]
    return obj


def _unflatten(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, dict) and "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if isinstance(obj, dict) and "__dict__" in obj:
        return {k: _unflatten(v, tensors) for k, v in obj["__dict__"]}
    if isinstance(obj, list):
        return [_unflatten(v, tensors) for v in obj]
    return obj


def save_train_state(
    state_root: Path, step: int, model, optimizer, scheduler, progress: dict[str, Any], rng: dict[str, Any] | None = None
) -> Path:
    """Write `state_root/step-NNNNNN` atomically, then drop older states (newest only). `rng`: the RNG
    state to restore on resume (default: the current one)."""
    state_root = Path(state_root)
    tensors: dict[str, torch.Tensor] = {}
    structure = {
        "optimizer": _flatten("optimizer", optimizer.state_dict(), tensors),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
    }

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp / ADAPTER_DIR, safe_serialization=True)
        save_file(tensors, str(tmp / OPTIMIZER_FILE))
        (tmp / OPTIMIZER_STRUCTURE_FILE).write_text(json.dumps(structure))
        (tmp / RNG_FILE).write_text(json.dumps(rng or rng_state()))
        (tmp / PROGRESS_FILE).write_text(json.dumps({**progress, "step": step}, indent=1))

    out = atomic_dir(state_root / resume_state_name(step), write)
    for older in step_folders(state_root):
        if older != out and older.is_dir():
            shutil.rmtree(older, ignore_errors=True)
    return out


def load_train_state(state_dir: Path, model, optimizer, scheduler) -> dict[str, Any]:
    """Restore adapter weights, optimizer, scheduler and RNG states; returns the progress record."""
    from peft import set_peft_model_state_dict

    state_dir = Path(state_dir)
    adapter = load_file(str(state_dir / ADAPTER_DIR / ADAPTER_WEIGHTS))
    result = set_peft_model_state_dict(model, adapter)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"{state_dir}: adapter does not match the model (unexpected keys {unexpected[:3]}...)")
    structure = json.loads((state_dir / OPTIMIZER_STRUCTURE_FILE).read_text())
    tensors = load_file(str(state_dir / OPTIMIZER_FILE))
    optimizer.load_state_dict(_unflatten(structure["optimizer"], tensors))
    if scheduler is not None and structure["scheduler"] is not None:
        scheduler.load_state_dict(structure["scheduler"])
    set_rng_state(json.loads((state_dir / RNG_FILE).read_text()))
    return json.loads((state_dir / PROGRESS_FILE).read_text())


__all__ = [
    "ADAPTER_DIR", "LOG_FILE", "OPTIMIZER_FILE", "PROGRESS_FILE", "RNG_FILE", "STATE_FILE", "STATE_PREFIX",
    "latest_train_state", "load_train_state", "read_state", "recover_checkpoint", "rng_state", "save_checkpoint",
    "save_train_state", "set_rng_state",
]  # fmt: skip
