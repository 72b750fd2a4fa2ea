"""`load_verified` is the documented way to load a registered version: one call with the tracking
URI, every file checked against the manifest recorded at registration before any code runs."""

from __future__ import annotations

from pathlib import Path

import mlflow
import mlflow.pyfunc as pyfunc
import pytest
from mlflow import MlflowClient

from components.tracking import model_registry
from components.tracking.manifest import ManifestError, manifest_of, manifest_tags


@pytest.fixture
def version(tmp_path):
    """A version registered in a real SQLite store: a logged folder, its manifest as version tags."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())
    run = client.create_run(experiment)
    model = tmp_path / "model"
    (model / "code").mkdir(parents=True)
    (model / "code" / "entry.py").write_text("print('the version's code')\n")
    (model / "MLmodel").write_text("flavors: {}\n")
    client.log_artifacts(run.info.run_id, str(model), "model")
    client.create_registered_model("m")
    made = client.create_model_version("m", f"{run.info.artifact_uri}/model", run.info.run_id, tags=manifest_tags(manifest_of(model)))
    client.set_registered_model_alias("m", "champion", made.version)
    return uri, tmp_path / "artifacts"


def test_a_version_loads_verified_from_the_tracking_uri_given(version, tmp_path, monkeypatch):
    uri, artifacts = version
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")  # not the store: the URI given wins
    assert mlflow.get_tracking_uri() != uri
    monkeypatch.setattr(pyfunc, "load_model", lambda path: Path(path))  # the module itself: mlflow.pyfunc is lazy
    loaded = model_registry.load_verified("models:/m@champion", tracking_uri=uri)
    assert (loaded / "code" / "entry.py").read_text() == "print('the version's code')\n"
    stored = next(artifacts.rglob("code/entry.py"))
    stored.write_text("import os  # injected\n")  # whoever can write the artifact store
    with pytest.raises(ManifestError, match=r"m version 1: files differ .*changed \['code/entry.py'\]"):
        model_registry.load_verified("models:/m/1", tracking_uri=uri)


FRESH_PROCESS = """
import sys
import mlflow.pyfunc as pyfunc
from pathlib import Path
pyfunc.load_model = lambda path: Path(path)  # the check is the download and verification, not the flavour
from components.tracking.model_registry import load_verified
model = load_verified("models:/m@champion", tracking_uri=sys.argv[1])
print((model / "code" / "entry.py").read_text().strip())
"""


def test_a_logged_model_version_loads_in_a_fresh_process_with_only_the_documented_arguments(tmp_path, monkeypatch):
    """A version registered from an MLflow 3 LoggedModel (source models:/m-...) is found through the
    tracking URI given, in a process with no MLflow environment at all (docs/operations.md's snippet)."""
    import os
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())
    logged = client.create_logged_model(experiment, name="adapter")
    model = tmp_path / "model"
    (model / "code").mkdir(parents=True)
    (model / "code" / "entry.py").write_text("print('logged model code')\n")
    (model / "MLmodel").write_text("flavors: {}\n")
    client.log_model_artifacts(logged.model_id, str(model))
    client.create_registered_model("m")
    with model_registry._global_tracking_uri(uri):  # registering resolves a models:/ source in MLflow's global store
        made = client.create_model_version("m", f"models:/{logged.model_id}", model_id=logged.model_id)
        stored = Path(mlflow.artifacts.download_artifacts(made.source, dst_path=str(tmp_path / "hashed")))
    for key, value in manifest_tags(manifest_of(stored)).items():  # hashed from the store, as groupwise's register does
        client.set_model_version_tag("m", made.version, key, value)
    assert made.source == f"models:/{logged.model_id}"
    client.set_registered_model_alias("m", "champion", made.version)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    root = Path(__file__).resolve().parents[2]
    elsewhere = tmp_path / "elsewhere"  # not the store's folder: MLflow's default URI is a database in the working folder
    elsewhere.mkdir()
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS, uri], cwd=elsewhere, env=env | {"PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("print('logged model code')")
