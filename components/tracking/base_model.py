"""Finding the base model a registered adapter was trained on, on any machine, by its SHA-256.

A version packaged with `registry.package_base_model: true` carries its base weights. Otherwise it
records the base model's provenance (`groupwise_model.json`: source, origin, `weights_sha256`), and
the base is looked for, in order, in `$GROUPWISE_BASE_MODEL_DIR`, in the folder it was registered
from and, for a `model.source: hf` base named by a model id, in the local Hugging Face cache. A
candidate is taken only if the SHA-256 of its `model.safetensors` is the recorded one, so a version
moved to another machine loads from wherever that machine keeps the same weights.

The HF cache holds the origin, not the provisioned folder: its snapshot of the id (found offline) is
taken only if its `*.safetensors` hash to the recorded `origin_sha256`; it is then provisioned as at
registration (`prepare_base_model`, same dtype) into `$XDG_CACHE_HOME/groupwise/base-models/<SHA-256>`
(`~/.cache` by default; reused later), and that copy must hash to the recorded `weights_sha256` too
(another transformers version could write other bytes: then it is passed over, naming both).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from components.contracts.errors import UserError
from components.hashing import files_sha256

BASE_MODEL_ENV = "GROUPWISE_BASE_MODEL_DIR"
WEIGHTS_FILE = "model.safetensors"


class BaseModelNotFoundError(UserError, FileNotFoundError):
    """No candidate folder holds the base weights the adapter was trained on."""


def expected_weights_sha256(provenance_file: Path) -> str:
    return str(json.loads(Path(provenance_file).read_text()).get("weights_sha256"))


def locate_base_model(
    expected_sha256: str, packaged: str | None = None, recorded: str | None = None, provenance_file: Path | None = None
) -> Path:
    """The first of packaged / $GROUPWISE_BASE_MODEL_DIR / recorded / the local HF cache (with the
    recorded `provenance_file` of an `hf` base named by id) whose weights hash to `expected_sha256`;
    `BaseModelNotFoundError` naming every candidate and why it was passed over."""
    candidates = [("packaged with the version", packaged), (f"${BASE_MODEL_ENV}", os.environ.get(BASE_MODEL_ENV)),
                  ("the folder it was registered from", recorded)]  # fmt: skip
    passed_over = []
    for label, folder in candidates:
        if folder:
            if (why := _passed_over(Path(folder), expected_sha256)) is None:
                return Path(folder)
            passed_over.append(f"{label} {folder}: {why}")
    provenance = json.loads(Path(provenance_file).read_text()) if provenance_file else {}
    if provenance.get("source") == "hf" and _is_model_id(provenance.get("origin", "")):
        folder, why = _provisioned_from_hf_cache(provenance)
        if folder is not None:
            if (why := _passed_over(folder, expected_sha256)) is None:
                return folder
            why = f"provisioned into {folder}: {why}"
        passed_over.append(f"the local Hugging Face cache ({provenance['origin']}): {why}")
    raise BaseModelNotFoundError(
        f"the base model the adapter was trained on (weights SHA-256 {expected_sha256[:12]}) is not here: "
        + ("; ".join(passed_over) or "no candidate folder")
        + f"; set {BASE_MODEL_ENV} to a folder holding it (`groupwise prepare-model` rebuilds the embedded one)"
    )


def _passed_over(folder: Path, expected_sha256: str) -> str | None:
    """Why `folder` is not the base (None: its `model.safetensors` hashes to `expected_sha256`)."""
    weights = folder / WEIGHTS_FILE
    if not weights.is_file():
        return f"no {WEIGHTS_FILE}"
    from components.models.provision import weights_sha256  # cached: a load right after hashes nothing again

    actual = weights_sha256(folder)
    return None if actual == expected_sha256 else f"SHA-256 {actual[:12]}, not {expected_sha256[:12]}"


def _is_model_id(origin: str) -> bool:
    """`org/name` (a model id), not the folder path an `hf` base may have come from instead."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(origin)
    except HFValidationError:
        return False
    return True


def provisioned_bases_dir() -> Path:
    """Where bases provisioned from the local HF cache are kept, one folder per weights SHA-256."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "groupwise" / "base-models"


def _provisioned_from_hf_cache(provenance: dict) -> tuple[Path | None, str]:
    """The recorded model id's snapshot in the local HF cache (offline), checked against the recorded
    origin SHA-256 and provisioned as at registration; (None, why) when it is not there or differs."""
    from components.config import ModelConfig
    from components.models.provision import ModelProvisionError, hf_location, prepare_base_model

    cfg = ModelConfig(source="hf", id=provenance["origin"], dtype=provenance.get("dtype", "float32"))
    try:
        snapshot = hf_location(cfg)
    except ModelProvisionError:
        return None, "not in it"
    actual = files_sha256(sorted(snapshot.glob("*.safetensors")))
    if actual != provenance.get("origin_sha256"):
        return None, f"{snapshot}: origin SHA-256 {actual[:12]}, not {str(provenance.get('origin_sha256'))[:12]}"
    out = provisioned_bases_dir() / provenance["weights_sha256"]
    prepare_base_model(cfg, out, seed=0)
    return out, ""
