"""Atomic checkpoints: everything is written to a temporary sibling folder, then renamed.

A reader never sees a half-written checkpoint: either the old folder or the complete new one.
Layout: `adapter/` (peft: adapter_config.json + adapter_model.safetensors), `train_state.json`,
`train_log.csv` (one row per step, also a DVC plot).
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

ADAPTER_DIR = "adapter"
STATE_FILE = "train_state.json"
LOG_FILE = "train_log.csv"


def save_checkpoint(out_dir: Path, model, state: dict[str, Any], log_rows: list[dict[str, float]]) -> Path:
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-tmp-", dir=out_dir.parent))
    try:
        model.save_pretrained(tmp / ADAPTER_DIR, safe_serialization=True)
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True))
        if log_rows:
            with (tmp / LOG_FILE).open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(log_rows[0]))
                writer.writeheader()
                writer.writerows(log_rows)
        old = None
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            out_dir.rename(old)
        tmp.rename(out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def read_state(checkpoint_dir: Path) -> dict[str, Any]:
    path = Path(checkpoint_dir) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint_dir}: no {STATE_FILE} (not a groupwise checkpoint)")
    return json.loads(path.read_text())
