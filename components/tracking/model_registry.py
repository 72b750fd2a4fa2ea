"""MLflow Model Registry: register an adapter as a new version and point an alias at it.

Aliases (`challenger`, `champion`) replace the deprecated stages (MLflow >= 2.9).
"""

from __future__ import annotations

import shutil
import warnings
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from components.models.provision import PROVENANCE_FILE

ENTRY_POINT = Path(__file__).with_name("pyfunc_entry.py")
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # components/: shipped with the model
PREDICT_PARAMS = {"max_new_tokens": 64, "temperature": 0.0}  # defaults of GroupwiseLoraModel.predict
PIP_REQUIREMENTS = ["torch==2.13.0", "transformers==5.19.0", "peft==0.21.2", "mlflow==3.17.2"]


@dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    alias: str
    run_id: str

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{self.alias}"


def register_adapter(
    adapter_dir: Path,
    base_model_dir: Path,
    model_name: str,
    alias: str,
    tags: Mapping[str, str],
    dtype: str = "float32",
    package_base_model: bool = False,
) -> RegisteredVersion:
    """Log adapter (+ base-model provenance, optionally the base itself) as a pyfunc in the active
    run, register it as a new version of `model_name`, tag it and set `alias` to it."""
    import mlflow
    from mlflow.models import infer_signature

    base_model_dir = Path(base_model_dir).resolve()
    artifacts = {"adapter": str(adapter_dir), "provenance": str(base_model_dir / PROVENANCE_FILE)}
    if package_base_model:
        artifacts["base_model"] = str(base_model_dir)
    run = mlflow.active_run()
    if run is None:
        raise RuntimeError("register_adapter needs an active MLflow run")
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # the params schema lives in the explicit signature, and an input example would make MLflow
        # load the whole model once more just to validate it: both advisories are moot here
        warnings.filterwarnings("ignore", message=".*(type hints|input example).*")
        # copy so that later runs cannot alter what the version points at
        staged = Path(tmp) / "adapter"
        shutil.copytree(adapter_dir, staged)
        artifacts["adapter"] = str(staged)
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(ENTRY_POINT),
            code_paths=[str(PACKAGE_DIR)],
            signature=infer_signature(
                ["What should I invest in?"], ["A diversified index fund."], params=dict(PREDICT_PARAMS)
            ),
            artifacts=artifacts,
            model_config={"base_model_dir": str(base_model_dir), "dtype": dtype},
            pip_requirements=PIP_REQUIREMENTS,
            registered_model_name=model_name,
            tags=dict(tags),
        )
    version = str(info.registered_model_version)
    client = mlflow.MlflowClient()
    for key, value in tags.items():
        client.set_model_version_tag(model_name, version, key, str(value))
    client.set_registered_model_alias(model_name, alias, version)
    return RegisteredVersion(model_name, version, alias, run.info.run_id)
