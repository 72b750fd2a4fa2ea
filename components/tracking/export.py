"""`groupwise export`: a registered version as one merged model folder that vLLM or transformers load.

The version is downloaded and checked against its SHA-256 manifest, its base model is found by the
SHA-256 of its weights (`components.tracking.base_model`), the LoRA deltas are merged into the base
weights (W ← W + (α/r)·B·A, peft `merge_and_unload`), and the folder gets the tokenizer, the chat
template and a model card (`README.md`, `model_card`) saying what the model is, what it was trained
on and with, and why it was registered, all read from the version's tags. The folder appears whole
or not at all (`contracts.atomic.atomic_dir`).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from components.contracts.atomic import atomic_dir
from components.contracts.errors import UserError
from components.contracts.summary import metric_path
from components.contracts.version_tags import CHAMPION_AT_REGISTRATION_TAG, GATE_PASSED_TAG, GATE_PREFIX, Provenance, VersionTags
from components.formatting import MISSING, number, signed, significant
from components.tracking.base_model import expected_weights_sha256, locate_base_model
from components.tracking.runs import is_server

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "generation_config.json")
CARD_FILE = "README.md"
EXPORT_FILE = "groupwise_export.json"  # what was exported from where, machine-readable


class ExportError(UserError, ValueError):
    """The export cannot be written where asked."""


@dataclass(frozen=True)
class ExportedModel:
    path: Path
    model_name: str
    version: str
    base_weights_sha256: str


def _pyfunc_parts(local: Path) -> tuple[dict[str, Path], dict]:
    """(artifact name -> local path, model_config) of a downloaded groupwise pyfunc model."""
    from mlflow.models import Model

    flavor = Model.load(str(local)).flavors["python_function"]
    artifacts = {name: local / spec["path"] for name, spec in (flavor.get("artifacts") or {}).items()}
    return artifacts, dict(flavor.get("config") or flavor.get("model_config") or {})


def _paths(section: str, *fields: str) -> tuple[str, ...]:
    return tuple(metric_path(section, field) for field in fields)


# the card's headline rows: metrics.json paths (fields of the summary contract, checked on import), "a → b"
CARD_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gender gap, base → tuned", _paths("consistency", "base_mean_gap", "tuned_mean_gap")),
    ("relative gap reduction", _paths("consistency", "relative_gap_reduction")),
    ("q (BH)", _paths("consistency", "q_value")),
    ("helpfulness, base → tuned", _paths("consistency", "base_helpfulness", "tuned_helpfulness")),
    ("length-controlled gap, base → tuned", _paths("consistency", "base_length_controlled_gap", "tuned_length_controlled_gap")),
    ("words per answer, base → tuned", _paths("consistency", "base_words", "tuned_words")),
    ("instruction compliance, base → tuned", _paths("consistency", "base_compliance", "tuned_compliance")),
    ("truncated share, tuned", _paths("consistency", "tuned_truncated_share")),
    ("validity (diversity tasks), base → tuned", _paths("diversity", "base_validity", "tuned_validity")),
)


NOT_RECORDED = "not recorded"  # a field the version's tags lack (registered before it was recorded)
LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
EVALUATED = (("consistency groups", metric_path("consistency", "n_groups")), ("diversity tasks", metric_path("diversity", "n_tasks")))


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...] = ("", "")) -> str:
    cells = [header, tuple("---" for _ in header), *rows]
    return "\n".join("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |" for row in cells)


def _param_order(path: str) -> tuple[int, str]:
    """Params by section as params.yaml has them (seed, model, lora, train, reward, eval), then by name."""
    sections = ("seed", "model", "lora", "train", "reward", "eval")
    section = path.split(".")[0]
    return (sections.index(section) if section in sections else len(sections), path)


def run_link(tracking_uri: str, experiment_id: str | None, run_id: str) -> str:
    """The MLflow UI page of the run: `{uri}/#/experiments/{experiment_id}/runs/{run_id}` on a
    tracking server; for a local store the run id with the `mlflow ui` command that serves it."""
    page = f"#/experiments/{experiment_id}/runs/{run_id}" if experiment_id else None
    if is_server(tracking_uri):
        return f"{tracking_uri.rstrip('/')}/{page}" if page else f"run `{run_id}` on {tracking_uri} (its experiment was not found)"
    where = f", then {LOCAL_UI}/{page}" if page else ""
    return f"run `{run_id}`: `mlflow ui --backend-store-uri {tracking_uri}`{where}"


def _gate_rows(record: VersionTags) -> list[tuple[str, ...]]:
    """One row per gate: verdict, measured value, threshold and reason (not recorded before they were)."""
    rows = []
    for name in sorted(record.gates.keys() | record.gate_details.keys()):
        verdict = {True: "pass", False: "fail", None: NOT_RECORDED}[record.gates.get(name)]
        detail = record.gate_details.get(name)
        shown = (significant(detail.value), significant(detail.threshold), detail.reason or NOT_RECORDED) if detail else (NOT_RECORDED,) * 3
        rows.append((name, verdict, *shown))
    return rows


def fairness_rows(metrics: dict[str, float]) -> list[tuple[str, str]]:
    """Per decision benchmark recorded in the version's metrics, each gender's discrimination score
    against the baseline (log-odds of yes, held-out questions), base → tuned with the tuned 95 % CI."""
    rows = []
    for path in sorted(metrics):
        parts = path.split(".")  # fairness.<benchmark>.scores.<key>.base_score
        if (
            len(parts) != 5
            or parts[0] != "fairness"
            or parts[2] != "scores"
            or parts[4] != "base_score"
            or not parts[3].startswith("gender_")
        ):
            continue
        stem = path.removesuffix("base_score")
        ci = [metrics.get(stem + k) for k in ("tuned_ci_low", "tuned_ci_high")]
        shown = f"{signed(metrics[path])} → " + (
            "n/a" if stem + "tuned_score" not in metrics else f"{signed(metrics[stem + 'tuned_score'])}"
        )
        shown += "" if None in ci else f" (95 % CI {signed(ci[0])} to {signed(ci[1])})"
        rows.append((f"{parts[1]}: {parts[3].removeprefix('gender_').replace('_', '-')} vs male, base → tuned (logit)", shown))
    return rows


def model_card(name: str, version, provenance: dict, tracking_uri: str, dtype: str, experiment_id: str | None = None) -> str:
    """The model card: base model and its SHA-256, the training data (hashes and size), the params,
    each gate's verdict, value, threshold and reason, headline metrics, and the MLflow run's link
    (`run_link`). The version's tags are read through their one decoder (`VersionTags.from_tags`);
    what a version registered before a field was recorded lacks reads "not recorded"."""
    record = VersionTags.from_tags(version.tags)
    recorded = record.gate_tags()
    verdict = [(key.removeprefix(GATE_PREFIX), recorded[key]) for key in (GATE_PASSED_TAG, CHAMPION_AT_REGISTRATION_TAG) if key in recorded]

    def metric(path: str) -> str:
        return significant(record.metrics[path], 3) if path in record.metrics else MISSING

    headline = [(row, " → ".join(metric(path) for path in paths)) for row, paths in CARD_METRICS]
    headline += fairness_rows(record.metrics) or [("decision benchmark (DiscrimEval)", NOT_RECORDED)]
    base = [
        ("source", provenance.get("source", "?")),
        ("origin", provenance.get("origin") or provenance.get("gguf_file") or "?"),
        ("architecture", provenance.get("architecture") or "?"),
        ("parameters", f"{number(provenance.get('n_parameters', 0) / 1e6, 1)} M"),
        ("weights SHA-256", f"`{provenance.get('weights_sha256')}`"),
    ]
    built_from = record.provenance or Provenance()
    data = [(row, NOT_RECORDED if value is None else f"`{value}`") for row, value in (
        ("groups files SHA-256", built_from.data_sha256), ("DVC md5", built_from.data_dvc_md5),
        ("training groups (train split, train.tasks / train.domains)", built_from.train_groups),
        ("training prompts (the groups' variants)", built_from.train_prompts),
        ("params hash", built_from.params_hash), ("git commit", built_from.git_commit),
        ("uncommitted code changes", built_from.git_dirty), ("their SHA-256", built_from.git_diff_sha256),
        ("evaluated by the code at", built_from.evaluated_commit),
        ("checkpoint DVC md5", built_from.checkpoint_dvc_md5))]  # fmt: skip
    data += [
        (f"held-out {what} evaluated", f"{record.metrics[path]:g}" if path in record.metrics else NOT_RECORDED) for what, path in EVALUATED
    ]
    params = [(path, f"`{record.params[path]}`") for path in sorted(record.params, key=_param_order)] or [("params", NOT_RECORDED)]
    why = [_table(verdict)] if verdict else []
    if gates := _gate_rows(record):
        why.append(_table(gates, ("gate", "verdict", "value", "threshold", "reason")))
    return (
        "\n\n".join(
            [
                f"# {name} version {version.version} (merged)",
                "A LoRA adapter trained with groupwise (group-relative RL for consistent answers across equivalent "
                f"prompts), merged into its base model. Weights: `model.safetensors` ({dtype}); load with "
                "`transformers.AutoModelForCausalLM.from_pretrained(<this folder>)` or `vllm serve <this folder>`.",
                "## Base model\n\n" + _table(base),
                "## Training data and params\n\n" + _table(data),
                "## Params (as registered)\n\n" + _table(params),
                "## Why it was registered\n\n" + ("\n\n".join(why) or _table([("gates", "none recorded")])),
                "## Headline metrics (held-out groups and decision questions)\n\n" + _table(headline),
                "## Tracking\n\n"
                + _table(
                    [
                        ("MLflow run", run_link(tracking_uri, experiment_id, version.run_id)),
                        ("MLflow tracking URI", tracking_uri),
                        ("run", f"`{version.run_id}`"),
                        ("model version", f"models:/{name}/{version.version}"),
                        ("exported", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")),
                    ]
                ),  # fmt: skip
            ]
        )
        + "\n"
    )


def export_version(model_name: str, out_dir: Path, tracking_uri: str, version: str | None = None, alias: str | None = None,
                   dtype: str | None = None) -> ExportedModel:  # fmt: skip
    """Merge registered `version` (or the one `alias` points at) into `out_dir`, atomically."""
    from components.models.lora import merge_adapter
    from components.tracking.model_registry import download_verified

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ExportError(f"{out_dir}: exists and is not empty; export into a new folder")
    uri = f"models:/{model_name}/{resolve_version(model_name, version, alias).version}"
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}-", dir=out_dir.parent, ignore_cleanup_errors=True) as staging:
        local, found = download_verified(uri, Path(staging) / "version")
        artifacts, config = _pyfunc_parts(local)
        expected = expected_weights_sha256(artifacts["provenance"])
        base_dir = locate_base_model(expected, packaged=str(artifacts.get("base_model") or ""), recorded=config.get("base_model_dir"),
                                     provenance_file=artifacts["provenance"])  # fmt: skip
        dtype = dtype or config.get("dtype", "float32")
        provenance = json.loads(artifacts["provenance"].read_text())
        card = model_card(model_name, found, provenance, tracking_uri, dtype, _experiment_id(found.run_id))

        def write(merged: Path) -> None:
            merge_adapter(base_dir, artifacts["adapter"], merged, dtype)
            for name in TOKENIZER_FILES:
                if (base_dir / name).is_file():
                    shutil.copy2(base_dir / name, merged / name)
            (merged / CARD_FILE).write_text(card)
            (merged / EXPORT_FILE).write_text(json.dumps(
                {"model_name": model_name, "version": str(found.version), "run_id": found.run_id, "tracking_uri": tracking_uri,
                 "base_weights_sha256": expected, "dtype": dtype, "tags": dict(found.tags)}, indent=2, sort_keys=True))  # fmt: skip

        atomic_dir(out_dir, write)  # out_dir is absent or empty (checked above)
    return ExportedModel(out_dir, model_name, str(found.version), expected)


def _experiment_id(run_id: str | None) -> str | None:
    """The experiment of the version's run (for its link), or None when the tracking store lacks it."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        return MlflowClient().get_run(run_id).info.experiment_id if run_id else None
    except MlflowException:
        return None


def resolve_version(model_name: str, version: str | None = None, alias: str | None = None):
    """The registered `ModelVersion` a --version or --alias names (ExportError when there is none)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    if (version is None) == (alias is None):
        raise ExportError("give exactly one of --version or --alias")
    try:
        client = MlflowClient()
        return client.get_model_version_by_alias(model_name, alias) if alias else client.get_model_version(model_name, version)
    except MlflowException as exc:
        what = f"alias @{alias}" if alias else f"version {version}"
        raise ExportError(f"{model_name}: no {what} in the model registry ({exc.error_code})") from None


def export_for_serving(model_name: str, exports_dir: Path, tracking_uri: str, version: str | None = None,
                       alias: str | None = None) -> ExportedModel:  # fmt: skip
    """The merged export of a version under `exports_dir/<name>-v<N>`, made once and reused while
    its recorded tags (manifest digest included) are the version's."""
    from components.tracking.manifest import MANIFEST_DIGEST_TAG

    found = resolve_version(model_name, version, alias)
    target = Path(exports_dir) / f"{model_name}-v{found.version}"
    record = target / EXPORT_FILE
    if record.is_file():
        saved = json.loads(record.read_text())
        if saved.get("tags", {}).get(MANIFEST_DIGEST_TAG) == found.tags.get(MANIFEST_DIGEST_TAG) and saved.get("version") == str(
            found.version
        ):
            return ExportedModel(target, model_name, str(found.version), saved["base_weights_sha256"])
        shutil.rmtree(target)
    return export_version(model_name, target, tracking_uri, version=str(found.version))
