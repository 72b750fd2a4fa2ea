"""Safety rules over the code and the configuration: safetensors only, no remote code, no pickle
loads, servers on loopback, no secrets in git-tracked infra files, paths confined to data/."""

from __future__ import annotations

import ast
import re

import pytest
import yaml

from components.config import ParamsError, load_params
from components.tracking.runs import is_transient
from tests.conftest import ROOT, make_project

CODE = sorted((ROOT / "components").rglob("*.py")) + sorted((ROOT / "flows").rglob("*.py"))


def _calls(name: str):
    for path in CODE:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    yield path, node


def _kwarg(node: ast.Call, name: str):
    return next((kw.value for kw in node.keywords if kw.arg == name), None)


def test_models_load_from_safetensors_or_gguf_only():
    loads = list(_calls("from_pretrained"))
    assert loads, "expected from_pretrained calls to check"
    for path, node in loads:
        owner = node.func.value if isinstance(node.func, ast.Attribute) else None
        if isinstance(owner, ast.Name) and owner.id in ("AutoTokenizer", "AutoConfig"):
            continue  # no weights
        safe = _kwarg(node, "use_safetensors")
        gguf = _kwarg(node, "gguf_file")
        assert gguf is not None or (isinstance(safe, ast.Constant) and safe.value is True), (
            f"{path.relative_to(ROOT)}:{node.lineno}: from_pretrained without use_safetensors=True"
        )


def test_remote_code_is_never_trusted():
    for path, node in _calls("from_pretrained"):
        flag = _kwarg(node, "trust_remote_code")
        assert flag is None or (isinstance(flag, ast.Constant) and flag.value is False), (
            f"{path.relative_to(ROOT)}:{node.lineno}: trust_remote_code must stay off"
        )
    for path in CODE:
        assert not re.search(r"trust_remote_code\s*=\s*True", path.read_text()), path


def test_no_pickle_loads():
    for path, node in _calls("load"):
        owner = node.func.value if isinstance(node.func, ast.Attribute) else None
        if isinstance(owner, ast.Name) and owner.id == "torch":
            flag = _kwarg(node, "weights_only")
            assert isinstance(flag, ast.Constant) and flag.value is True, (
                f"{path.relative_to(ROOT)}:{node.lineno}: torch.load without weights_only=True"
            )
    for path in CODE:
        text = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(pickle|cloudpickle|dill|joblib)\b", text, re.M), path


def test_servers_bind_to_loopback_and_infra_holds_no_secrets():
    script = (ROOT / "infra/local-servers.sh").read_text()
    assert "HOST=${GROUPWISE_HOST:-127.0.0.1}" in script
    compose = yaml.safe_load((ROOT / "infra/docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("${GROUPWISE_BIND:-127.0.0.1}:"), f"{name}: {port} not on loopback by default"
        for key, value in (service.get("environment") or {}).items():
            if any(word in key for word in ("PASSWORD", "SECRET", "ACCESS_KEY")):
                assert str(value).startswith("${"), f"{name}.{key}: credential not from the environment"
    assert "/infra/.env" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize(
    ("field", "value"),
    [("checkpoints", "../outside"), ("reports", "/etc"), ("groups", "data/../../escape"), ("registry", "mlruns")],
)
def test_paths_cannot_escape_the_data_folder(tmp_path, field, value):
    project = make_project(tmp_path / "p", "tiny", {f"paths.{field}": value})
    with pytest.raises(ParamsError, match=rf"paths\.{field} = '{re.escape(value)}' escapes the project's data folder"):
        load_params(project / "params.yaml")


def test_paths_inside_data_and_through_a_symlinked_data_folder_are_fine(tmp_path):
    project = make_project(tmp_path / "p", "tiny", {"paths.checkpoints": "data/ckpt/../checkpoints2"})
    assert load_params(project / "params.yaml").paths.checkpoints.name == "checkpoints2"
    # a data folder that is a symlink to a bigger disk stays allowed
    big = tmp_path / "big-disk"
    (project / "data").rename(big)
    (project / "data").symlink_to(big, target_is_directory=True)
    assert load_params(project / "params.yaml").paths.templates.is_dir()


def test_schedule_and_registry_settings_are_validated(tmp_path):
    bad_cron = make_project(tmp_path / "a", "tiny", {"schedule.cron": "every monday"})
    with pytest.raises(ParamsError, match=r"schedule: .*cron: 'every monday' must have 5 fields"):
        load_params(bad_cron / "params.yaml")
    bad_zone = make_project(tmp_path / "b", "tiny", {"schedule.timezone": "Mars/Olympus"})
    with pytest.raises(ParamsError, match=r"unknown IANA time zone 'Mars/Olympus'"):
        load_params(bad_zone / "params.yaml")
    same_alias = make_project(tmp_path / "c", "tiny", {"registry.champion_alias": "challenger"})
    with pytest.raises(ParamsError, match=r"registry: alias, champion_alias, previous_champion_alias must differ"):
        load_params(same_alias / "params.yaml")


def test_transient_faults_are_told_apart_from_real_errors():
    import requests
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, TEMPORARILY_UNAVAILABLE

    try:
        try:
            raise requests.exceptions.ConnectionError("Connection refused")
        except Exception as exc:  # how MLflow's REST client wraps it (implicit __context__)
            raise MlflowException(f"API request failed with exception {exc}")  # noqa: B904  (implicit __context__, as MLflow does)
    except MlflowException as wrapped:
        assert is_transient(wrapped)
    assert is_transient(MlflowException("busy", error_code=TEMPORARILY_UNAVAILABLE))
    assert not is_transient(MlflowException("no such model", error_code=RESOURCE_DOES_NOT_EXIST))
    assert not is_transient(ValueError("consistency.jsonl row 3: rule max_chars failed"))
    assert not is_transient(FileNotFoundError("metrics.json"))
