"""The study store (components/study/store.py): checkpoints and results copied whole between an
arm's project folder and a shared folder, newest resumable state only, stale results never pulled."""

from __future__ import annotations

import json
from pathlib import Path

from components.study.store import ArmStore, Mirror, pull_checkpoints, pull_results, push_checkpoints, push_results


def _state(folder: Path, steps: int, progress: bool = False) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter").mkdir()
    (folder / "adapter" / "adapter_model.safetensors").write_bytes(b"w" * steps)
    if progress:
        (folder / "progress.json").write_text(json.dumps({"steps": steps}))
    else:
        (folder / "train_state.json").write_text(json.dumps({"steps": steps}))
    return folder


def test_push_keeps_the_newest_resumable_state_and_skips_incomplete_folders(tmp_path):
    local, remote = tmp_path / "ckpt", tmp_path / "store" / "state-abc"
    _state(local / "resume" / "step-000001", 1, progress=True)
    assert push_checkpoints(local, remote) == ["resume/step-000001"]
    assert push_checkpoints(local, remote) == []  # already there
    _state(local / "resume" / "step-000002", 2, progress=True)
    (local / "resume" / ".step-000003-tmp").mkdir()  # a folder being written: not complete
    assert push_checkpoints(local, remote) == ["resume/step-000002"]
    assert sorted(p.name for p in (remote / "resume").iterdir()) == ["step-000002"]
    # a latest trained with other params is not pushed; one accepted replaces the resumable state
    _state(local / "latest", 2)
    assert push_checkpoints(local, remote, accept_latest=lambda: False) == []
    import shutil

    shutil.rmtree(local / "resume")  # the trainer removes it when the run completes
    assert push_checkpoints(local, remote) == ["latest"]
    assert not (remote / "resume").exists() and (remote / "latest" / "train_state.json").is_file()


def test_pull_brings_a_resumable_state_to_a_fresh_worker_but_not_an_older_one(tmp_path):
    remote = tmp_path / "store" / "state-abc"
    _state(remote / "resume" / "step-000002", 2, progress=True)
    _state(remote / "snapshots" / "step-00001", 1)
    fresh = tmp_path / "worker-b"
    assert sorted(pull_checkpoints(remote, fresh)) == ["resume/step-000002", "snapshots/step-00001"]
    assert (fresh / "resume" / "step-000002" / "adapter" / "adapter_model.safetensors").read_bytes() == b"ww"
    ahead = tmp_path / "worker-c"
    _state(ahead / "resume" / "step-000003", 3, progress=True)
    assert pull_checkpoints(remote, ahead) == ["snapshots/step-00001"]  # its own state is newer


def test_results_are_pulled_only_for_the_arms_current_fingerprint(tmp_path):
    box = ArmStore.of(tmp_path / "store", "study", "grpo")
    done = tmp_path / "worker" / "results" / "study" / "grpo"
    done.mkdir(parents=True)
    (done / "arm.json").write_text(json.dumps({"fingerprint": "f1"}))
    (done / "metrics.json").write_text("{}")
    assert push_results(done, box) and box.results_fingerprint() == "f1"
    mine = tmp_path / "submitter" / "results" / "study" / "grpo"
    assert not pull_results(box, mine, "f2")  # the arm's params changed since: not its results
    assert pull_results(box, mine, "f1") and (mine / "metrics.json").is_file()
    assert not pull_results(box, mine, "f1")  # already the same


def test_mirror_copies_while_the_block_runs_and_once_more_at_its_end(tmp_path):
    local, remote = tmp_path / "ckpt", tmp_path / "store"
    lines: list[str] = []
    with Mirror(local, remote, lambda: True, every=0.05, log=lines.append):
        _state(local / "resume" / "step-000001", 1, progress=True)
    assert (remote / "resume" / "step-000001" / "progress.json").is_file()
    assert any("resume/step-000001" in line for line in lines)
