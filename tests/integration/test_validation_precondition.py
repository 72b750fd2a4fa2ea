"""Validation is a precondition of train and evaluate: they read only groups files a passing
report vouches for (same bytes, same rules and bounds, checked with this model's tokenizer), or
validate them first; bad files stop them in one line with exit code 2, before any model loads."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from components.config import load_params
from components.validation import GroupValidationError
from components.validation.precondition import ensure_validated, stale_reason
from flows import steps
from flows.cli import app
from tests.conftest import make_project, seed_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture
def params(tmp_path, tiny_model_dir):
    project = make_project(tmp_path / "p", "tiny")
    seed_tiny_model(project, tiny_model_dir)
    params = load_params(project / "params.yaml")
    steps.build(params)
    return params


def _report(params):
    return params.paths.validation / "report.json"


def _rows(params, task="consistency"):
    path = params.paths.groups / f"{task}.jsonl"
    return path, [json.loads(line) for line in path.read_text().splitlines()]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_report_vouches_only_for_the_files_rules_and_tokenizer_it_checked(params):
    report, model = _report(params), params.paths.base_model
    assert stale_reason(params.paths.groups, params.data, report, model).startswith("no readable validation report")
    assert ensure_validated(params.paths.groups, params.data, report, model).startswith("groups files validated first")
    assert ensure_validated(params.paths.groups, params.data, report, model) == "groups files: the validation report matches them"
    # other bounds in params.yaml: the old verdict does not count
    tighter = params.data.model_copy(update={"max_prompt_tokens": 100})
    assert "other data rules, bounds or instruction families" in stale_reason(params.paths.groups, tighter, report, model)
    # judged without the instruction families file (or against another one): the verdict on instructions does not count
    families = params.paths.instruction_families
    assert "other data rules, bounds or instruction families" in stale_reason(params.paths.groups, params.data, report, model, families)
    assert ensure_validated(params.paths.groups, params.data, report, model, families).startswith("groups files validated first")
    assert stale_reason(params.paths.groups, params.data, report, model, families) is None
    # validated before the model existed: the token rules were not judged
    saved = json.loads(report.read_text())
    saved["settings"]["tokenizer_sha256"] = None
    report.write_text(json.dumps(saved))
    assert "not checked with this model's tokenizer" in stale_reason(params.paths.groups, params.data, report, model, families)
    # a file edited since: validated again, and a broken one fails with the rule and line
    path, rows = _rows(params)
    rows[1]["group_id"] = rows[0]["group_id"]
    _write(path, rows)
    assert "changed since" in stale_reason(params.paths.groups, params.data, report, model, families)
    with pytest.raises(GroupValidationError, match="rule 'group_id_unique' failed for 2 row"):
        ensure_validated(params.paths.groups, params.data, report, model, families)
    assert json.loads(report.read_text())["success"] is False


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_train_and_evaluate_refuse_a_group_in_both_splits_in_one_line(params, command):
    assert steps.validate(params).metrics["success"] is True  # a passing report of the good files
    path, rows = _rows(params)
    train = next(r for r in rows if r["split"] == "train")
    heldout = next(r for r in rows if r["split"] == "heldout")
    heldout["group_id"] = train["group_id"]
    _write(path, rows)
    result = CliRunner().invoke(app, [command, "--params", str(params.root / "params.yaml")])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"groupwise {command} failed:" in text and "rule 'group_id_in_one_split' failed for 2 row(s)" in text
    assert "Traceback" not in result.output
    assert not (params.paths.checkpoints / "latest").exists()  # nothing trained, nothing half-written
    assert json.loads(_report(params).read_text())["success"] is False
