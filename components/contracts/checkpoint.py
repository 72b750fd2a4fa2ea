"""The checkpoint layout: the folders and files `train` writes and evaluate, register, the study
and export read, named once.

    <paths.checkpoints>/
      latest/                    the final checkpoint (the DVC output of `train`)
        adapter/                 peft: adapter_config.json + adapter_model.safetensors
        train_state.json         steps, samples, seconds, fingerprint, base model provenance, last metrics
        train_log.csv            one row per step (a DVC plot)
      resume/step-NNNNNN/        the newest resumable state (`train.save_every`; removed when the run
                                 completes): adapter/, optimizer.safetensors + optimizer.json,
                                 rng.json, progress.json
      snapshots/step-NNNNN/      an evaluable checkpoint every `train.snapshot_every` steps (the
                                 learning curve), laid out as latest/

A resumable state's folder has six digits, a snapshot's five (as they always had: folders already
on disk keep their names). Every folder appears whole or not at all (`contracts.atomic.atomic_dir`).
The siblings `resume/` and `snapshots/` sit beside the final checkpoint, whatever its name
(`CheckpointLayout.beside`). `read_state` reads a checkpoint's train_state.json; `recover_checkpoint`
puts back a checkpoint whose replacement a crash interrupted. Writing checkpoints needs torch and
lives in `components.grpo.checkpoint`. Standard library only: every layer may use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.contracts.atomic import recover_dir

LATEST_DIR = "latest"
RESUME_DIR = "resume"
SNAPSHOTS_DIR = "snapshots"
STEP_PREFIX = "step-"  # step-NNNNNN (resume), step-NNNNN (snapshots)

ADAPTER_DIR = "adapter"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
STATE_FILE = "train_state.json"
LOG_FILE = "train_log.csv"

OPTIMIZER_FILE = "optimizer.safetensors"  # resumable state: the optimizer's tensors
OPTIMIZER_STRUCTURE_FILE = "optimizer.json"  # ... and the rest of its state dict, tensors by reference
RNG_FILE = "rng.json"
PROGRESS_FILE = "progress.json"


def resume_state_name(step: int) -> str:
    """`step-000012`: the folder of the resumable state after `step`."""
    return f"{STEP_PREFIX}{step:06d}"


def snapshot_name(step: int) -> str:
    """`step-00012`: the folder of the snapshot checkpoint of `step`."""
    return f"{STEP_PREFIX}{step:05d}"


def step_folders(folder: Path) -> list[Path]:
    """The `step-*` entries of `folder`, sorted (by step: the numbers are zero-padded)."""
    return sorted(Path(folder).glob(f"{STEP_PREFIX}*"))


def adapter_files(adapter_dir: Path) -> tuple[Path, Path]:
    """(adapter_config.json, adapter_model.safetensors) of a peft adapter folder."""
    return Path(adapter_dir) / ADAPTER_CONFIG, Path(adapter_dir) / ADAPTER_WEIGHTS


def latest_train_state(state_root: Path) -> Path | None:
    """The newest complete state folder (temporary folders start with a dot and are ignored)."""
    candidates = [p for p in step_folders(state_root) if (p / PROGRESS_FILE).is_file()]
    return candidates[-1] if candidates else None


def read_state(checkpoint_dir: Path) -> dict[str, Any]:
    """train_state.json of a checkpoint (final or snapshot); FileNotFoundError when it has none."""
    path = Path(checkpoint_dir) / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint_dir}: no {STATE_FILE} (not a groupwise checkpoint)")
    return json.loads(path.read_text())


def recover_checkpoint(out_dir: Path) -> str | None:
    """Finish a checkpoint swap a crash interrupted (`contracts.atomic.recover_dir`)."""
    return recover_dir(out_dir)


@dataclass(frozen=True)
class CheckpointLayout:
    """The checkpoint folders under `root` (`paths.checkpoints` of params.yaml)."""

    root: Path

    @classmethod
    def beside(cls, checkpoint_dir: Path) -> "CheckpointLayout":
        """The layout a final checkpoint folder belongs to: its siblings resume/ and snapshots/."""
        return cls(Path(checkpoint_dir).parent)

    @property
    def latest(self) -> Path:
        return Path(self.root) / LATEST_DIR

    @property
    def resume(self) -> Path:
        return Path(self.root) / RESUME_DIR

    @property
    def snapshots(self) -> Path:
        return Path(self.root) / SNAPSHOTS_DIR

    def snapshot(self, step: int) -> Path:
        return self.snapshots / snapshot_name(step)

    def snapshot_dirs(self) -> list[Path]:
        """The snapshot checkpoints, by step."""
        return step_folders(self.snapshots)


__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_DIR",
    "ADAPTER_WEIGHTS",
    "LATEST_DIR",
    "LOG_FILE",
    "OPTIMIZER_FILE",
    "OPTIMIZER_STRUCTURE_FILE",
    "PROGRESS_FILE",
    "RESUME_DIR",
    "RNG_FILE",
    "SNAPSHOTS_DIR",
    "STATE_FILE",
    "STEP_PREFIX",
    "CheckpointLayout",
    "adapter_files",
    "latest_train_state",
    "read_state",
    "recover_checkpoint",
    "resume_state_name",
    "snapshot_name",
    "step_folders",
]
