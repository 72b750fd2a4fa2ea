"""The checkpoint layout contract: one set of names, what the writer writes and the readers read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from components.contracts import checkpoint as layout
from components.contracts.checkpoint import (
    CheckpointLayout,
    adapter_files,
    latest_train_state,
    read_state,
    resume_state_name,
    snapshot_name,
)
from components.grpo import checkpoint as writer
from components.grpo.trainer import snapshot_dir

ROOT = Path(__file__).resolve().parents[2]


class Model:
    """What the checkpoint writers need of a peft model."""

    def __init__(self):
        self.linear = torch.nn.Linear(2, 1)

    def save_pretrained(self, out, safe_serialization=True):
        out.mkdir(parents=True, exist_ok=True)
        for path in adapter_files(out):
            path.write_bytes(b"x")


def test_the_layout_names():
    paths = CheckpointLayout(Path("data/checkpoints"))
    assert (paths.latest, paths.resume, paths.snapshots) == (
        Path("data/checkpoints/latest"), Path("data/checkpoints/resume"), Path("data/checkpoints/snapshots"),
    )  # fmt: skip
    assert paths.snapshot(40) == Path("data/checkpoints/snapshots/step-00040")
    assert resume_state_name(7) == "step-000007" and snapshot_name(7) == "step-00007"
    assert CheckpointLayout.beside(Path("somewhere/ckpt")).resume == Path("somewhere/resume")
    assert snapshot_dir(Path("runs/latest"), 3) == Path("runs/snapshots/step-00003")
    assert [p.name for p in adapter_files(Path("a"))] == ["adapter_config.json", "adapter_model.safetensors"]
    assert (layout.ADAPTER_DIR, layout.STATE_FILE, layout.LOG_FILE) == ("adapter", "train_state.json", "train_log.csv")


def test_the_writer_uses_the_contract_names():
    """components.grpo.checkpoint re-exports the contract's names (older imports keep working)."""
    for name in ("ADAPTER_DIR", "STATE_FILE", "LOG_FILE", "OPTIMIZER_FILE", "RNG_FILE", "PROGRESS_FILE"):
        assert getattr(writer, name) == getattr(layout, name)
    assert writer.STATE_PREFIX == layout.STEP_PREFIX
    assert writer.read_state is read_state and writer.latest_train_state is latest_train_state


def test_what_is_written_is_found_where_the_layout_says(tmp_path):
    paths = CheckpointLayout(tmp_path)
    model = Model()
    writer.save_checkpoint(paths.latest, model, {"steps": 2}, [{"loss": 1.0}])
    config, weights = adapter_files(paths.latest / layout.ADAPTER_DIR)
    assert config.is_file() and weights.is_file() and (paths.latest / layout.LOG_FILE).is_file()
    assert read_state(paths.latest) == {"steps": 2}
    writer.save_checkpoint(snapshot_dir(paths.latest, 1), model, {"steps": 1}, [])
    assert [read_state(s)["steps"] for s in paths.snapshot_dirs()] == [1]
    optimizer = torch.optim.AdamW(model.linear.parameters())
    for step in (1, 2):
        writer.save_train_state(paths.resume, step, model, optimizer, None, {"samples": step})
    assert latest_train_state(paths.resume) == paths.resume / "step-000002"
    assert [p.name for p in paths.resume.iterdir()] == ["step-000002"]  # newest only


def test_a_symlinked_checkpoint_folder_is_followed_and_every_training_kept(tmp_path):
    """latest -> elsewhere: each save lands in elsewhere, the link stays, nothing is set aside."""
    elsewhere, paths = tmp_path / "elsewhere", CheckpointLayout(tmp_path / "checkpoints")
    elsewhere.mkdir()
    paths.root.mkdir()
    paths.latest.symlink_to(elsewhere)
    (paths.root / ".latest-old").symlink_to(elsewhere)  # what the swap of the link itself used to leave
    for steps in (1, 2, 3):
        writer.save_checkpoint(paths.latest, Model(), {"steps": steps}, [])
        assert paths.latest.is_symlink() and read_state(elsewhere) == {"steps": steps}
    assert sorted(p.name for p in paths.root.iterdir()) == ["latest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "elsewhere"]


def test_a_stale_aside_link_does_not_lose_the_new_checkpoint(tmp_path):
    """A `.latest-old` link (what a swap of a symlinked folder used to leave) is removed, not followed."""
    paths, kept = CheckpointLayout(tmp_path / "checkpoints"), tmp_path / "kept"
    kept.mkdir()
    (kept / "x").write_text("x")
    writer.save_checkpoint(paths.latest, Model(), {"steps": 1}, [])
    (paths.root / ".latest-old").symlink_to(kept)
    writer.save_checkpoint(paths.latest, Model(), {"steps": 2}, [])
    assert read_state(paths.latest) == {"steps": 2} and (kept / "x").is_file()
    assert sorted(p.name for p in paths.root.iterdir()) == ["latest"]


def test_a_failed_swap_keeps_the_new_folder_and_says_where(tmp_path, monkeypatch):
    from components.contracts import atomic
    from components.contracts.errors import UserError

    def fail(tmp, out_dir):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(atomic, "_swap", fail)
    with pytest.raises(UserError, match="the new version is kept in") as info:
        writer.save_checkpoint(tmp_path / "latest", Model(), {"steps": 1}, [])
    kept = Path(str(info.value).rsplit(" ", 1)[-1])
    assert read_state(kept) == {"steps": 1} and "\n" not in str(info.value)


def test_the_contract_imports_no_torch():
    code = "import sys, components.contracts.checkpoint; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_a_temporary_folder_left_by_a_killed_writer_is_removed_by_the_next_write(tmp_path):
    """`kill -9` during a checkpoint write leaves `.latest-tmp-<pid>-…` behind; the next write of the same
    folder removes it, and never a temporary folder whose writer is still alive."""
    import os
    import signal

    from components.contracts.atomic import atomic_dir

    out = tmp_path / "latest"
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = tmp_path / f".latest-tmp-{writer.pid}-abc"
        alive.mkdir()
        dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
        orphans = [tmp_path / f".latest-tmp-{dead_pid}-xyz", tmp_path / ".latest-tmp-k2j3h"]  # a killed writer; a nameless one
        for orphan in orphans:
            (orphan / "adapter").mkdir(parents=True)
        atomic_dir(out, lambda folder: (folder / "train_state.json").write_text("{}"))
        assert (out / "train_state.json").is_file() and alive.is_dir()
        assert not any(orphan.exists() for orphan in orphans)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, "latest"])
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
