"""Which arms a work pool runs, and what the study store holds of them: the arms still to run for
their current params, those that wait for the arm they start from, and the copies between an arm's
folders and the store (`components.study.store`)."""

from __future__ import annotations

import os
from pathlib import Path

from components.study.domain import Study, arm_done, arm_fingerprint, arm_params, curve_pending
from components.study.store import STORE_ENV, ArmStore, pull_checkpoints, pull_results


def store_path(store: str | Path | None) -> Path | None:
    """The study store: `store`, else $GROUPWISE_STUDY_STORE, else none."""
    value = store or os.environ.get(STORE_ENV)
    return Path(value) if value else None


def pull_arm(store: Path, study: Study, name: str, arm_p, fingerprint: str) -> ArmStore:
    """Copy from the store an arm's results (when they are for `fingerprint`) and the checkpoint
    folders this worker lacks; returns the arm's folder in the store."""
    box = ArmStore.of(store, study.folder, name)
    pull_results(box, study.arm_dir(name), fingerprint)
    for rel in pull_checkpoints(box.checkpoints(fingerprint), arm_p.paths.checkpoints):
        print(f"[{study.folder}/{name}] from the store: {rel}")
    return box


def pending_arms(params, study: Study, arms: list[str]) -> list[str]:
    """The arms that are not finished for their current params (or whose learning curve is not). By
    params alone: the submitter builds no groups; each worker builds them and checks them itself."""
    todo = []
    for name in arms:
        arm = arm_params(params, study, name)
        if not arm_done(study, name, arm_fingerprint(arm, study.config.arms[name].kind)) or curve_pending(arm, study, name):
            todo.append(name)
    return todo


def waiting_arms(study: Study, todo: list[str]) -> dict[str, str]:
    """{arm: the unfinished arm it starts from} for the arms of `todo` that must wait (`start_from`):
    they are submitted by a later `--submit`, once the adapter they start from exists."""
    return {a: study.config.arms[a].start_from for a in todo if study.config.arms[a].start_from in todo}


def collect_results(params, study: Study, store: Path | None) -> list[str]:
    """Copy into results/ the store's results of the study's arms (those for their current params)."""
    if store is None:
        return []
    got = []
    for name in study.config.arms:
        arm = arm_params(params, study, name)
        if pull_results(ArmStore.of(store, study.folder, name), study.arm_dir(name), arm_fingerprint(arm, study.config.arms[name].kind)):
            got.append(name)
    return got
