"""A full disk while training saves: on a real 4 MiB filesystem (tmpfs, mounted for the test; where
mounting is not allowed, the write is fault-injected with ENOSPC instead), `train` stops with a
one-line `DiskFullError` naming the folder, the previous checkpoint is intact and still `latest`, no
temporary folder is left, the MLflow run is FAILED, and once space is freed training works again."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import mlflow
import pytest

from components.config import load_params
from components.contracts.atomic import DiskFullError, atomic_write_text
from components.hashing import files_sha256
from flows import steps
from tests.conftest import make_project, seed_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture
def small_disk(tmp_path, tiny_model_dir):
    """(project, real): a tiny project whose data/checkpoints is a 4 MiB tmpfs when this process may
    mount one (root, as in CI), else a plain folder (real=False: the write is fault-injected)."""
    project = make_project(tmp_path / "p", "tiny")
    seed_tiny_model(project, tiny_model_dir)
    folder = project / "data" / "checkpoints"
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True).returncode == 0
    yield project, mounted
    if mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> Path:
    """Write a file until the filesystem is full; returns it (delete it to free the space)."""
    filler = folder / "filler.bin"
    with filler.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def _leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*") if "-tmp-" in p.name or p.name.endswith("-old"))


def test_a_full_disk_at_save_keeps_the_previous_checkpoint_and_says_so_in_one_line(tiny_model_dir, tmp_path, small_disk, monkeypatch):
    project, real = small_disk
    params = load_params(project / "params.yaml")
    disk = params.paths.checkpoints
    steps.build(params)
    steps.validate(params)
    latest = params.paths.checkpoints / "latest"
    steps.train(params)
    before = files_sha256(sorted(p for p in latest.rglob("*") if p.is_file()))

    saving = params.model_copy(update={"train": params.train.model_copy(update={"save_every": 1, "steps": 3})})
    if real:
        filler = _fill(disk)
    else:  # fault injection: the adapter's weights file cannot be written
        import safetensors.torch

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(safetensors.torch, "save_file", full)
        monkeypatch.setattr("components.grpo.checkpoint.save_file", full)
    with pytest.raises(DiskFullError) as failed:
        steps.train(saving)
    message = str(failed.value)
    assert "\n" not in message
    assert "no space left on its disk while writing it" in message and str(params.paths.checkpoints) in message
    assert "previous one is unchanged" in message and "no resumable state was saved: train again" in message
    assert files_sha256(sorted(p for p in latest.rglob("*") if p.is_file())) == before, "the previous checkpoint changed"
    assert _leftovers(disk) == [], "a partial folder was left"
    mlflow.set_tracking_uri(params.tracking.uri)
    runs = mlflow.search_runs(experiment_names=[params.tracking.experiment], output_format="list", order_by=["attributes.start_time DESC"])
    assert [r.info.status for r in runs if r.info.run_name == "train"][:2] == ["FAILED", "FINISHED"]
    # a file written atomically on the full disk: the same one line, the old file kept
    report = disk / "report.txt"  # (on the same small disk)
    if real:
        filler.unlink()
        atomic_write_text(report, "old")
        filler = _fill(disk)
        with pytest.raises(DiskFullError, match="no space left on its disk"):
            atomic_write_text(report, "x" * 2**20)
        assert report.read_text() == "old" and _leftovers(disk) == []
        filler.unlink()
    else:
        monkeypatch.undo()
    # space again: training saves as usual
    steps.train(saving)
    assert files_sha256(sorted(p for p in latest.rglob("*") if p.is_file())) != before
    assert _leftovers(disk) == []
