"""MLflow 3 lineage: every trained adapter is a LoggedModel, linked to its data and its evaluation.

- `log_adapter` (train step): the adapter as a pyfunc LoggedModel of the train run, tagged with its
  SHA-256 (`ADAPTER_TAG`: the hash that metrics.json's binding records); the training groups are the
  run's input datasets.
- `find_adapter_model` (evaluate and register steps): the newest READY LoggedModel of the
  experiment with that tag. The link is the adapter's content, not a file written beside the
  checkpoint, which would make the DVC-tracked checkpoint differ between identical runs.
- `log_evaluation` (evaluate step): the evaluation's metrics against the model's `model_id` and the
  held-out groups; groups, validation report and benchmark files as the evaluate run's inputs,
  linked to the model.
- `set_verdict` (register step): the gate verdict as the model's tags, refused models too; a
  passing one is registered from this LoggedModel (`model_registry.register_adapter(model_id=)`).

A file is a `MetaDataset`: its name, its URI as source, its SHA-256 as digest (cut to the 36
characters MLflow's dataset table keeps; the full hash is the input's `groupwise.sha256` tag).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from components.hashing import file_sha256, folder_files_sha256

ADAPTER_TAG = "groupwise.adapter_sha256"
PACKAGED_TAG = "groupwise.packages_base_model"
VERDICT_TAG, REASONS_TAG = "gate.verdict", "gate.reasons"
SHA_TAG = "groupwise.sha256"
DIGEST_CHARS = 36  # MLflow's `datasets.digest` column


@dataclass(frozen=True)
class FileInput:
    """One file a step read, as an MLflow input: `name` (shown in the UI), the file, its context."""

    name: str
    path: Path
    context: str

    def dataset(self):
        from mlflow.data.dataset_source_registry import get_registered_sources, resolve_dataset_source
        from mlflow.data.meta_dataset import MetaDataset

        # MLflow registers its local-file source class twice (one per URI scheme): asked among all its
        # sources, it warns that a file URI "can be interpreted in multiple ways"; the last one is its pick
        local = [c for c in get_registered_sources() if c.__name__ == "LocalArtifactDatasetSource"][-1:]
        source = resolve_dataset_source(Path(self.path).resolve().as_uri(), candidate_sources=local or None)
        return MetaDataset(source, name=self.name, digest=file_sha256(self.path)[:DIGEST_CHARS])


def file_inputs(paths: Mapping[str, Path], context: str) -> list[FileInput]:
    """The existing files of `paths` ({name: path}) as inputs of `context` ("training", "evaluation")."""
    return [FileInput(name, Path(path), context) for name, path in paths.items() if Path(path).is_file()]


def log_inputs(inputs: list[FileInput], model_id: str | None = None) -> None:
    """Log `inputs` to the active run, and LoggedModel `model_id` (when given) as its model input."""
    import mlflow
    from mlflow.entities import LoggedModelInput

    if inputs:
        mlflow.log_inputs(
            datasets=[i.dataset() for i in inputs],
            contexts=[i.context for i in inputs],
            tags_list=[{SHA_TAG: file_sha256(i.path)} for i in inputs],
        )
    if model_id:  # (`log_inputs` takes models on Databricks only; `log_input` everywhere)
        mlflow.log_input(model=LoggedModelInput(model_id))


def log_adapter(adapter_dir: Path, base_model_dir: Path, dtype: str, package_base_model: bool, inputs: list[FileInput]) -> str:
    """Log the adapter as a pyfunc LoggedModel of the active run, tagged with its SHA-256, and the
    files it was trained on as the run's inputs; returns its `model_id`."""
    from components.tracking.model_registry import log_pyfunc

    tags = {ADAPTER_TAG: folder_files_sha256(adapter_dir), PACKAGED_TAG: str(package_base_model).lower()}
    info = log_pyfunc(adapter_dir, base_model_dir, dtype, package_base_model, tags=tags)
    log_inputs(inputs)
    return info.model_id


def find_adapter_model(adapter_sha: str, package_base_model: bool | None = None) -> str | None:
    """The `model_id` of the newest READY LoggedModel of the active experiment with this adapter
    hash (and this packaging, when given); None when there is none."""
    import mlflow

    run = mlflow.active_run()
    if run is None:
        raise RuntimeError("find_adapter_model needs an active MLflow run (its experiment is searched)")
    experiment = run.info.experiment_id
    query = f"tags.`{ADAPTER_TAG}` = '{adapter_sha}'"
    if package_base_model is not None:
        query += f" AND tags.`{PACKAGED_TAG}` = '{str(package_base_model).lower()}'"
    found = mlflow.search_logged_models(
        experiment_ids=[experiment],
        filter_string=query,
        order_by=[{"field_name": "creation_time", "ascending": False}],
        output_format="list",
    )
    ready = [m for m in found if str(m.status) in ("READY", "LoggedModelStatus.READY")]
    return ready[0].model_id if ready else None


def log_evaluation(model_id: str, metrics: Mapping[str, float], inputs: list[FileInput], scored_on: FileInput | None) -> None:
    """The evaluate run's `metrics` against LoggedModel `model_id` (and the dataset `scored_on`),
    and `inputs` as the run's inputs linked to the model."""
    import mlflow

    log_inputs(inputs, model_id)
    if metrics:
        mlflow.log_metrics(dict(metrics), model_id=model_id, dataset=scored_on.dataset() if scored_on else None)


def set_verdict(model_id: str, passed: bool, reasons: list[str]) -> None:
    """The gate's verdict on LoggedModel `model_id` as its tags (`gate.verdict`: passed / refused)."""
    import mlflow

    mlflow.set_logged_model_tags(
        model_id, {VERDICT_TAG: "passed" if passed else "refused", REASONS_TAG: "; ".join(reasons)[:4000] or "all gates passed"}
    )


__all__ = ["ADAPTER_TAG", "FileInput", "file_inputs", "find_adapter_model", "log_adapter",
           "log_evaluation", "log_inputs", "set_verdict"]  # fmt: skip
