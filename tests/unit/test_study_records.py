"""The project's committed study results are the results of its study files: every arm record under
results/<study>/arms/ carries the fingerprint of the arm's params as the study files (and the study's
frozen_params.json) define them now, so a changed study file or frozen record, or a changed default or
profile where a study did not freeze its params, that would silently re-run (or orphan) finished arms fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _studies() -> list[str | None]:
    from components.config import load_params

    return [None, *sorted(load_params(ROOT / "params.yaml").studies)]


@pytest.mark.parametrize("name", _studies(), ids=lambda n: n or "consistency")
def test_every_committed_arm_record_is_for_its_current_params(name, monkeypatch):
    from components.study.domain import ARM_FILE, arm_done, arm_fingerprint, arm_params, load_study

    monkeypatch.chdir(ROOT)  # the studies' folders are relative to the project
    params, study = load_study(ROOT / "params.yaml", name)
    committed = [arm for arm in study.config.arms if (study.arm_dir(arm) / ARM_FILE).is_file()]
    # a confirmation runs its arms after its plan (held by it or by a study it pools)
    preregistered = any((layout.folder / "preregistration.json").is_file() for layout in study.pooled_layouts)
    assert committed or preregistered, f"no committed arm of {name or 'consistency'} under {study.arm_dir('x').parent}"
    kinds = study.config.arms
    stale = [arm for arm in committed if not arm_done(study, arm, arm_fingerprint(arm_params(params, study, arm), kinds[arm].kind))]
    assert not stale, f"arms whose committed results are not for their current params: {stale}"
    # a study in git keeps the params its arms ran under: a release that changes a default must not move it
    assert study.layout.frozen_params.is_file(), f"{study.layout.frozen_params}: missing (groupwise study --freeze-params)"
