"""The study store: a folder every worker can read and write (a shared filesystem: NFS, EFS,
Filestore, a ReadWriteMany volume), where a study's arms keep what another worker needs to go on.

    <store>/<study folder>/<arm>/
      results/                      the arm's results folder as it is in results/<study>/arms/<arm>/
      state-<fingerprint>/          its checkpoints, for the arm's current params only:
        latest/                     the final checkpoint (once trained)
        resume/step-NNNNNN/         the newest resumable training state
        snapshots/step-NNNNN/       the learning-curve snapshots

An arm copies its checkpoint folders there as they appear (`Mirror`, a thread beside training) and
copies them back before it starts (`pull_checkpoints`), so an arm whose worker died resumes on any
other worker from its newest saved state; a changed arm (another fingerprint) starts afresh. Every
folder appears whole or not at all (`contracts.atomic.atomic_dir`); a folder the trainer removes
while it is being copied is skipped and taken at the next round. Standard library only.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from components.contracts.atomic import atomic_dir
from components.contracts.checkpoint import (
    LATEST_DIR,
    PROGRESS_FILE,
    RESUME_DIR,
    SNAPSHOTS_DIR,
    STATE_FILE,
    latest_train_state,
    step_folders,
)
from components.study.layout import ARM_FILE

STORE_ENV = "GROUPWISE_STUDY_STORE"
RESULTS_DIR = "results"


@dataclass(frozen=True)
class ArmStore:
    """One arm's folder in the store."""

    root: Path  # <store>/<study folder>/<arm>

    @classmethod
    def of(cls, store: Path | str, study_folder: str, arm: str) -> "ArmStore":
        return cls(Path(store) / study_folder / arm)

    @property
    def results(self) -> Path:
        return self.root / RESULTS_DIR

    def checkpoints(self, fingerprint: str) -> Path:
        return self.root / f"state-{fingerprint}"

    def results_fingerprint(self) -> str | None:
        path = self.results / ARM_FILE
        return json.loads(path.read_text()).get("fingerprint") if path.is_file() else None


def _copy(src: Path, dest: Path) -> bool:
    """Copy folder `src` to `dest` as a whole; False when `src` changed or vanished meanwhile."""
    try:
        atomic_dir(dest, lambda tmp: shutil.copytree(src, tmp, dirs_exist_ok=True))
    except (FileNotFoundError, shutil.Error):
        return False
    return True


def _same_state(a: Path, b: Path) -> bool:
    """Two checkpoints carry the same train_state.json (the same training written them)."""
    fa, fb = a / STATE_FILE, b / STATE_FILE
    return fa.is_file() and fb.is_file() and fa.read_bytes() == fb.read_bytes()


def _complete(root: Path) -> dict[str, Path]:
    """The complete checkpoint folders under a checkpoints root, by their path relative to it."""
    found: dict[str, Path] = {}
    if (root / LATEST_DIR / STATE_FILE).is_file():
        found[LATEST_DIR] = root / LATEST_DIR
    newest = latest_train_state(root / RESUME_DIR)
    if newest is not None:
        found[f"{RESUME_DIR}/{newest.name}"] = newest
    for snapshot in step_folders(root / SNAPSHOTS_DIR):
        if (snapshot / STATE_FILE).is_file():
            found[f"{SNAPSHOTS_DIR}/{snapshot.name}"] = snapshot
    return found


def push_checkpoints(local: Path, remote: Path, accept_latest: Callable[[], bool] = lambda: True) -> list[str]:
    """Copy the local checkpoint folders the store lacks (a newer `latest` replaces its copy, when
    `accept_latest()` says it was trained with the arm's current params; only the newest resumable
    state is kept). Returns what was copied."""
    copied = []
    for rel, src in _complete(Path(local)).items():
        dest = Path(remote) / rel
        if rel == LATEST_DIR and ((dest.is_dir() and _same_state(src, dest)) or not accept_latest()):
            continue
        if rel != LATEST_DIR and (dest / (PROGRESS_FILE if rel.startswith(RESUME_DIR) else STATE_FILE)).is_file():
            continue
        if _copy(src, dest):
            copied.append(rel)
    kept = latest_train_state(Path(remote) / RESUME_DIR)
    for old in step_folders(Path(remote) / RESUME_DIR):
        if kept is not None and old.name < kept.name and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)
    if (Path(remote) / LATEST_DIR / STATE_FILE).is_file() and not (Path(local) / RESUME_DIR).exists():
        shutil.rmtree(Path(remote) / RESUME_DIR, ignore_errors=True)  # trained: nothing left to resume
    return copied


def pull_checkpoints(remote: Path, local: Path) -> list[str]:
    """Copy into the local checkpoints what the store holds and they lack: its `latest` when it
    differs, its newest resumable state unless the local one is as new, missing snapshots."""
    copied = []
    local = Path(local)
    for rel, src in _complete(Path(remote)).items():
        dest = local / rel
        if rel == LATEST_DIR:
            if dest.is_dir() and _same_state(src, dest):
                continue
        elif rel.startswith(RESUME_DIR):
            if (local / LATEST_DIR / STATE_FILE).is_file() and _same_state(local / LATEST_DIR, Path(remote) / LATEST_DIR):
                continue
            mine = latest_train_state(local / RESUME_DIR)
            if mine is not None and mine.name >= src.name:
                continue
        elif (dest / STATE_FILE).is_file():
            continue
        if _copy(src, dest):
            copied.append(rel)
    return copied


def push_results(local: Path, store: ArmStore) -> bool:
    """Copy an arm's finished results folder into the store."""
    return (Path(local) / ARM_FILE).is_file() and _copy(Path(local), store.results)


def pull_results(store: ArmStore, local: Path, fingerprint: str) -> bool:
    """Copy the store's results of an arm into `local` when they are for `fingerprint` (the arm's
    current params) and the local folder is not already those results."""
    if store.results_fingerprint() != fingerprint:
        return False
    mine, theirs = Path(local) / ARM_FILE, store.results / ARM_FILE
    if mine.is_file() and mine.read_bytes() == theirs.read_bytes():
        same = all((Path(local) / p.name).is_file() and (Path(local) / p.name).read_bytes() == p.read_bytes()
                   for p in store.results.iterdir() if p.is_file())  # fmt: skip
        if same:
            return False
    return _copy(store.results, Path(local))


class Mirror:
    """While the block runs, copy new checkpoint folders from `local` to `remote` every `every`
    seconds (a daemon thread); once more when it ends, whether it ends well or not."""

    def __init__(self, local: Path, remote: Path, accept_latest: Callable[[], bool], every: float = 2.0, log=print) -> None:
        self.local, self.remote, self.every, self.log = Path(local), Path(remote), every, log
        self.accept_latest = accept_latest
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="study-store-mirror", daemon=True)

    def _round(self) -> None:
        try:
            copied = push_checkpoints(self.local, self.remote, self.accept_latest)
        except OSError as exc:  # the store unreachable for a moment: try again at the next round
            self.log(f"[store] not copied this round ({exc})")
            return
        for rel in copied:
            self.log(f"[store] {rel} -> {self.remote}")

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._round()

    def __enter__(self) -> "Mirror":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self._round()
