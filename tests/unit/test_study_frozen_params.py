"""A study's frozen params (`groupwise study --freeze-params`, results/NAME/frozen_params.json): its arms
start from them whatever the profile and the product's defaults become later; a freeze never changes
what ran and is written once."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from tests.conftest import make_project

STUDY = {"profile": "tiny", "arms": {"a": {"overrides": {"seed": 7}}, "b": {"overrides": {"train": {"lr": 1.0e-3}}}}}


def _project(tmp_path):
    return make_project(tmp_path / "p", "tiny", {"studies.demo": STUDY})


def _change_defaults(root, **train) -> None:
    """What a later release does: other defaults (here written into params.yaml's own sections)."""
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw.setdefault("train", {}).update(train)
    raw.setdefault("reward", {})["weights"] = {"entropy_helpfulness": 1.0}
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


def test_arms_start_from_the_frozen_params_after_the_defaults_change(tmp_path):
    from components.study.domain import arm_fingerprint, arm_params, freeze_params, load_study

    root = _project(tmp_path)
    params, study = load_study(root / "params.yaml", "demo")
    before = {arm: arm_params(params, study, arm) for arm in study.config.arms}
    path = freeze_params(params, study)
    assert path == root / "results/demo/frozen_params.json"
    _change_defaults(root, epsilon_low=0.3, max_grad_norm=5.0)

    params, study = load_study(root / "params.yaml", "demo")
    assert params.train.epsilon_low == 0.3  # the product's new default ...
    for arm, old in before.items():
        now = arm_params(params, study, arm)  # ... is not what a frozen study's arms run
        assert now.train.epsilon_low == old.train.epsilon_low != 0.3 and now.train.max_grad_norm == old.train.max_grad_norm
        assert now.reward.weights == old.reward.weights  # a dict field is replaced whole, not merged with the new one
        assert arm_fingerprint(now, "train") == arm_fingerprint(old, "train")
    assert arm_params(params, study, "b").train.lr == 1.0e-3 and arm_params(params, study, "a").seed == 7  # arms' overrides on top

    path.unlink()  # without the file the same study follows today's defaults
    params, study = load_study(root / "params.yaml", "demo")
    assert arm_params(params, study, "a").train.epsilon_low == 0.3


def test_a_freeze_is_written_once_and_refused_where_a_finished_arm_ran_under_other_params(tmp_path):
    from components.config import ParamsError
    from components.study.domain import freeze_params, load_study
    from flows.cli import app

    root = _project(tmp_path)
    params, study = load_study(root / "params.yaml", "demo")
    record = study.arm_dir("a") / "arm.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"name": "a", "kind": "train", "fingerprint": "0" * 16}))
    with pytest.raises(ParamsError, match=r"finished arms \['a'\] ran under other params"):
        freeze_params(params, study)
    assert not study.layout.frozen_params.exists()

    record.unlink()
    runner = CliRunner()
    first = runner.invoke(app, ["study", "--study", "demo", "--freeze-params", "--params", str(root / "params.yaml")])
    assert first.exit_code == 0, first.output
    written = study.layout.frozen_params.read_bytes()
    again = runner.invoke(app, ["study", "--study", "demo", "--freeze-params", "--params", str(root / "params.yaml")])
    assert again.exit_code == 2 and "never change" in again.output
    assert study.layout.frozen_params.read_bytes() == written
