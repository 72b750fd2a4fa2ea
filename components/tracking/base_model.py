"""Finding the base model a registered adapter was trained on, on any machine, by its SHA-256.

A version packaged with `registry.package_base_model: true` carries its base weights. Otherwise it
records the base model's provenance (`groupwise_model.json`: source, origin, `weights_sha256`), and
the base is looked for, in order, in `$GROUPWISE_BASE_MODEL_DIR` and in the folder it was registered
from. A candidate is taken only if the SHA-256 of its `model.safetensors` is the recorded one, so a
version moved to another machine loads from wherever that machine keeps the same weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from components.contracts.errors import UserError
from components.hashing import file_sha256

BASE_MODEL_ENV = "GROUPWISE_BASE_MODEL_DIR"
WEIGHTS_FILE = "model.safetensors"


class BaseModelNotFoundError(UserError, FileNotFoundError):
    """No candidate folder holds the base weights the adapter was trained on."""


def expected_weights_sha256(provenance_file: Path) -> str:
    return str(json.loads(Path(provenance_file).read_text()).get("weights_sha256"))


def locate_base_model(expected_sha256: str, packaged: str | None = None, recorded: str | None = None) -> Path:
    """The first of packaged / $GROUPWISE_BASE_MODEL_DIR / recorded whose weights hash to
    `expected_sha256`; `BaseModelNotFoundError` naming every candidate and why it was passed over."""
    candidates = [("packaged with the version", packaged), (f"${BASE_MODEL_ENV}", os.environ.get(BASE_MODEL_ENV)),
                  ("the folder it was registered from", recorded)]  # fmt: skip
    passed_over = []
    for label, folder in candidates:
        if not folder:
            continue
        weights = Path(folder) / WEIGHTS_FILE
        if not weights.is_file():
            passed_over.append(f"{label} {folder}: no {WEIGHTS_FILE}")
            continue
        actual = file_sha256(weights)
        if actual == expected_sha256:
            return Path(folder)
        passed_over.append(f"{label} {folder}: SHA-256 {actual[:12]}, not {expected_sha256[:12]}")
    raise BaseModelNotFoundError(
        f"the base model the adapter was trained on (weights SHA-256 {expected_sha256[:12]}) is not here: "
        + ("; ".join(passed_over) or "no candidate folder")
        + f"; set {BASE_MODEL_ENV} to a folder holding it (`groupwise prepare-model` rebuilds the embedded one)"
    )
