"""MLflow Model Registry: register an adapter as a version, promote it to champion, roll back.

Aliases (`challenger`, `champion`, `previous-champion`) replace the deprecated stages (MLflow >= 2.9).

Consistency under concurrency. MLflow makes each single call atomic (a version number is allocated
in one transaction, an alias is set in one statement), but "read the current alias, then move it"
is a read-modify-write. Every such update here runs under one inter-process lock per (tracking
URI, model name) (`registry_lock`, a `filelock` next to a SQLite database, or in the temp folder
for a server URI), and follows two rules that keep readers consistent at every instant:

- a version gets all its tags *before* any alias points at it (`mlflow.register_model(tags=...)`
  creates version and tags together);
- the `challenger` alias only moves forward (to a higher version), so two registrations that
  finish in either order leave it on the newest one.

The lock serialises the processes of one host (the embedded SQLite default, a team's scheduled
worker). Processes on several hosts writing to one server are serialised by running registration
from one Prefect work pool with a concurrency limit of 1 (see prefect.yaml), not by this lock.

Idempotency: each version is tagged with the fingerprint of what it registers (adapter and
metrics hashes); registering the same fingerprint again returns the existing version, so a retried
or repeated registration never adds a second version.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from components.contracts.errors import UserError
from components.contracts.version_tags import (
    FINGERPRINT_TAG,
    NO_CHAMPION,
    Champion,
    PromotionCheck,
    PromotionRecord,
    RollbackRecord,
    Verdict,
    VersionTags,
)
from components.models.provision import PROVENANCE_FILE
from components.tracking.manifest import manifest_of, manifest_tags, verify

ENTRY_POINT = Path(__file__).with_name("pyfunc_entry.py")
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # components/: shipped with the model
PREDICT_PARAMS = {"max_new_tokens": 64, "temperature": 0.0}  # defaults of GroupwiseLoraModel.predict
PIP_REQUIREMENTS = ["torch==2.13.0", "transformers==5.19.0", "peft==0.21.2", "mlflow==3.17.2"]
HISTORY_TAG = "groupwise.champion_history"  # registered-model tag: JSON list, current champion last
HISTORY_LIMIT = 50


class PromotionError(UserError, ValueError):
    """A promotion or rollback that cannot be done as asked (the message says why)."""


class RegistryLockError(UserError, TimeoutError):
    """Another process held the registry lock of a model longer than registry.lock_timeout_seconds."""


@dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    alias: str
    run_id: str
    reused: bool = False  # the fingerprint was already registered: no new version was created
    alias_moved: bool = True  # False when a newer version already held the alias

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{self.alias}"

    def outcome(self) -> dict:
        """What decision.json records of the registration."""
        return {"model_name": self.name, "version": self.version, "alias": self.alias, "uri": self.uri,
                "reused": self.reused, "alias_moved": self.alias_moved}  # fmt: skip

    def describe(self) -> str:
        """One line: registered (or found registered) as which version, and where the alias is."""
        line = f"{'already registered' if self.reused else 'registered'} {self.name} version {self.version}"
        if self.alias_moved:
            return line + f", @{self.alias} ({self.uri})"
        return line + f" (@{self.alias} stays on a newer version)"


@dataclass(frozen=True)
class PromotionResult:
    name: str
    version: str
    previous: str | None
    forced: bool
    check: Verdict | None = None
    history: list[str] = field(default_factory=list)


def _client():
    import mlflow

    return mlflow.MlflowClient()


def actor() -> str:
    """Who is acting: $GROUPWISE_USER, else the login name."""
    try:
        return os.environ.get("GROUPWISE_USER") or getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "unknown"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def lock_path(tracking_uri: str, model_name: str) -> Path:
    """Where the registry lock of (tracking URI, model) lives: beside a SQLite DB, else in tmp."""
    key = hashlib.sha256(f"{tracking_uri}|{model_name}".encode()).hexdigest()[:16]
    prefix = "sqlite:///"
    if tracking_uri.startswith(prefix):
        return Path(tracking_uri[len(prefix) :]).with_name(f".registry-{key}.lock")
    return Path(tempfile.gettempdir()) / f"groupwise-registry-{key}.lock"


@contextmanager
def registry_lock(model_name: str, timeout: float):
    """Inter-process lock serialising alias updates of `model_name` on the current tracking URI;
    `RegistryLockError` when another process holds it longer than `timeout` seconds."""
    import mlflow
    from filelock import FileLock, Timeout

    path = lock_path(mlflow.get_registry_uri(), model_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        lock = FileLock(str(path), timeout=timeout).acquire()
    except Timeout as exc:  # kept as the cause: a flow retries it (`runs.is_transient`)
        raise RegistryLockError(
            f"{exc} (another process is updating {model_name} in the registry; registry.lock_timeout_seconds = {timeout:g})"
        ) from exc
    with lock:
        yield


def _version_by_alias(client, name: str, alias: str):
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return None  # no such model, or the alias is not set
        raise


def champion(model_name: str, champion_alias: str = "champion") -> Champion | None:
    """The current champion and the metrics recorded at its registration, or None."""
    version = _version_by_alias(_client(), model_name, champion_alias)
    if version is None:
        return None
    return Champion.of(version.version, version.tags)


def find_version(model_name: str, fingerprint: str):
    """The version of `model_name` registered with this fingerprint, or None."""
    from mlflow.exceptions import MlflowException

    try:
        found = _client().search_model_versions(f"name = '{model_name}' and tags.`{FINGERPRINT_TAG}` = '{fingerprint}'")
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    return min(found, key=lambda v: int(v.version)) if found else None


def _move_alias_forward(client, name: str, alias: str, version: str) -> bool:
    """Point `alias` at `version` unless it already points at a newer one; True if it moved."""
    current = _version_by_alias(client, name, alias)
    if current is not None and int(current.version) > int(version):
        return False
    client.set_registered_model_alias(name, alias, version)
    return True


def log_pyfunc(adapter_dir: Path, base_model_dir: Path, dtype: str = "float32", package_base_model: bool = False, tags: dict | None = None):
    """Log the adapter (+ base-model provenance, optionally the base itself) as a pyfunc LoggedModel
    of the active run; returns MLflow's `ModelInfo` (`model_id`, `model_uri`)."""
    import mlflow
    from mlflow.models import infer_signature

    base_model_dir = Path(base_model_dir).resolve()
    artifacts = {"adapter": str(adapter_dir), "provenance": str(base_model_dir / PROVENANCE_FILE)}
    if package_base_model:
        artifacts["base_model"] = str(base_model_dir)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # the params schema lives in the explicit signature, and an input example would make MLflow
        # load the whole model once more just to validate it: both advisories are moot here
        warnings.filterwarnings("ignore", message=".*(type hints|input example).*")
        # copy so that later runs cannot alter what the model points at
        staged = Path(tmp) / "adapter"
        shutil.copytree(adapter_dir, staged)
        artifacts["adapter"] = str(staged)
        return mlflow.pyfunc.log_model(
            name="adapter",
            python_model=str(ENTRY_POINT),
            code_paths=[str(PACKAGE_DIR)],
            signature=infer_signature(["What should I invest in?"], ["A diversified index fund."], params=dict(PREDICT_PARAMS)),
            artifacts=artifacts,
            model_config={"base_model_dir": str(base_model_dir), "dtype": dtype},
            pip_requirements=PIP_REQUIREMENTS,
            tags=tags,
        )


def register_adapter(
    adapter_dir: Path,
    base_model_dir: Path,
    model_name: str,
    alias: str,
    tags: VersionTags | Mapping[str, str],
    dtype: str = "float32",
    package_base_model: bool = False,
    fingerprint: str | None = None,
    lock_timeout: float = 120.0,
    description: str | None = None,
    model_id: str | None = None,
) -> RegisteredVersion:
    """Register LoggedModel `model_id` (the trained adapter the train step logged; None: log the
    adapter now, `log_pyfunc`) as a new version of `model_name` with `tags` (`VersionTags`, or raw
    tags decoded by it) and `description` (its verdict and figures), and move `alias` forward to it.

    With a `fingerprint` already registered, returns that version instead (idempotent)."""
    import mlflow

    run = mlflow.active_run()
    if run is None:
        raise RuntimeError("register_adapter needs an active MLflow run")
    client = _client()
    record = tags if isinstance(tags, VersionTags) else VersionTags.from_tags(tags)
    if fingerprint:
        record = replace(record, fingerprint=fingerprint)
    tags = record.to_tags()
    if fingerprint:
        existing = find_version(model_name, fingerprint)
        if existing is not None:
            with registry_lock(model_name, lock_timeout):
                moved = _move_alias_forward(client, model_name, alias, str(existing.version))
            return RegisteredVersion(model_name, str(existing.version), alias, existing.run_id or run.info.run_id, True, moved)

    with tempfile.TemporaryDirectory() as tmp:
        if model_id is None:
            model_id = log_pyfunc(adapter_dir, base_model_dir, dtype, package_base_model).model_id
        model_uri = f"models:/{model_id}"
        # what the version will run, hashed from the store itself (tags live in the tracking DB)
        logged = Path(mlflow.artifacts.download_artifacts(model_uri, dst_path=str(Path(tmp) / "logged")))
        tags.update(manifest_tags(manifest_of(logged)))
    with registry_lock(model_name, lock_timeout):
        if fingerprint and (existing := find_version(model_name, fingerprint)) is not None:
            moved = _move_alias_forward(client, model_name, alias, str(existing.version))
            return RegisteredVersion(model_name, str(existing.version), alias, existing.run_id or run.info.run_id, True, moved)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*already exists.*")
            created = mlflow.register_model(model_uri, model_name, tags=tags)
        version = str(created.version)
        if description:
            client.update_model_version(model_name, version, description=description)
        moved = _move_alias_forward(client, model_name, alias, version)
    return RegisteredVersion(model_name, version, alias, run.info.run_id, False, moved)


def _history(client, name: str) -> list[str]:
    raw = client.get_registered_model(name).tags.get(HISTORY_TAG, "[]")
    try:
        history = json.loads(raw)
    except json.JSONDecodeError:
        return []
    return [str(v) for v in history] if isinstance(history, list) else []


def promote(
    model_name: str,
    version: str,
    promotion_check: PromotionCheck,
    reason: str = "",
    force: bool = False,
    champion_alias: str = "champion",
    previous_alias: str = "previous-champion",
    lock_timeout: float = 120.0,
) -> PromotionResult:
    """Move `champion_alias` to `version`; the old champion gets `previous_alias`.

    `promotion_check(tags, reigning champion)` is the registry's policy
    (`components.release.promotion.promotion_check` with the gate thresholds): it refuses a version
    whose registration gates did not pass (tag `gate.passed`) or that is worse than the current
    champion by more than the gate's margins; a refusal stands unless `force` with a `reason`. Who,
    when, why and the previous champion are recorded as tags of the promoted version."""
    from mlflow.exceptions import MlflowException

    if force and not reason.strip():
        raise PromotionError("--force needs --reason: say why the gates are overridden (it is recorded)")
    client = _client()
    version = str(version)
    with registry_lock(model_name, lock_timeout):
        try:
            target = client.get_model_version(model_name, version)
        except MlflowException as exc:
            raise PromotionError(f"{model_name} version {version}: not found in the registry") from exc
        current = _version_by_alias(client, model_name, champion_alias)
        previous = str(current.version) if current is not None else None
        if previous == version:
            raise PromotionError(f"{model_name} version {version} is already @{champion_alias}")
        reigning = Champion.of(previous, current.tags) if current is not None else None
        check = promotion_check(VersionTags.from_tags(target.tags), reigning)
        if not check.passed and not force:
            raise PromotionError(
                f"{model_name} version {version} refused: " + "; ".join(check.reasons()) + " (use --force --reason '...' to override)"
            )
        history = _history(client, model_name)
        if previous is not None and (not history or history[-1] != previous):
            history.append(previous)  # a champion set by hand: remember it too
        history = (history + [version])[-HISTORY_LIMIT:]
        record = PromotionRecord(
            by=actor(),
            at=_now(),
            reason=reason or "gates passed",
            forced=bool(force and not check.passed),
            previous_champion=previous or NO_CHAMPION,
            check="pass" if check.passed else "fail: " + "; ".join(check.reasons()),
        )
        for key, value in record.to_tags().items():  # tags first: the alias never points at an unrecorded version
            client.set_model_version_tag(model_name, version, key, value[:5000])
        client.set_registered_model_alias(model_name, champion_alias, version)
        if previous is not None:
            client.set_registered_model_alias(model_name, previous_alias, previous)
        client.set_registered_model_tag(model_name, HISTORY_TAG, json.dumps(history))
    return PromotionResult(model_name, version, previous, bool(record.forced), check, history)


def rollback(
    model_name: str,
    reason: str = "",
    champion_alias: str = "champion",
    previous_alias: str = "previous-champion",
    lock_timeout: float = 120.0,
) -> PromotionResult:
    """Give `champion_alias` back to the previous champion; the demoted version is tagged why."""
    client = _client()
    with registry_lock(model_name, lock_timeout):
        current = _version_by_alias(client, model_name, champion_alias)
        if current is None:
            raise PromotionError(f"{model_name}: no @{champion_alias} to roll back")
        restored = _version_by_alias(client, model_name, previous_alias)
        if restored is None:
            raise PromotionError(f"{model_name}: no @{previous_alias} to roll back to")
        demoted, back = str(current.version), str(restored.version)
        history = _history(client, model_name)
        if history and history[-1] == demoted:
            history.pop()
        if not history or history[-1] != back:
            history = [back]  # aliases were moved by hand: the recorded history no longer applies
        record = RollbackRecord(by=actor(), at=_now(), reason=reason or "rollback", restored=back)
        for key, value in record.to_tags().items():
            client.set_model_version_tag(model_name, demoted, key, value[:5000])
        client.set_registered_model_alias(model_name, champion_alias, back)
        if len(history) >= 2:
            client.set_registered_model_alias(model_name, previous_alias, history[-2])
        else:
            client.delete_registered_model_alias(model_name, previous_alias)
        client.set_registered_model_tag(model_name, HISTORY_TAG, json.dumps(history))
    return PromotionResult(model_name, back, demoted, False, None, history)


def load_verified(model_uri: str, dst: Path | None = None, tracking_uri: str | None = None):
    """The way to load a registered version: `mlflow.pyfunc.load_model`, after checking a downloaded
    copy of the version against the SHA-256 manifest recorded at registration (ManifestError on any
    difference) and before any of its code is imported; the verified copy is what is loaded.
    `model_uri`: models:/<name>/<version> or models:/<name>@<alias>; `tracking_uri`: the store
    holding the registry (default: MLflow's current one)."""
    import mlflow

    local, _ = download_verified(model_uri, dst, tracking_uri)
    return mlflow.pyfunc.load_model(str(local))


@contextmanager
def _global_tracking_uri(uri: str | None):
    """MLflow's process-wide tracking URI set to `uri` for the block, then put back (None: unchanged):
    MLflow resolves a version's `models:/m-<id>` source against it, whatever URI the call is given."""
    if uri is None:
        yield
        return
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri  # MLflow's own; pinned by test_load_verified

    with _use_tracking_uri(uri):
        yield


def download_verified(model_uri: str, dst: Path | None = None, tracking_uri: str | None = None):
    """(local folder, ModelVersion) of a version downloaded and checked against its SHA-256 manifest."""
    import mlflow

    client = _client() if tracking_uri is None else mlflow.MlflowClient(tracking_uri, registry_uri=tracking_uri)
    name, _, ref = model_uri.removeprefix("models:/").partition("/")
    if "@" in name:
        name, alias = name.split("@", 1)
        version = client.get_model_version_by_alias(name, alias)
    else:
        version = client.get_model_version(name, ref)
    folder = Path(dst or tempfile.mkdtemp(prefix="groupwise-verified-"))
    with _global_tracking_uri(tracking_uri):  # a LoggedModel source (models:/m-...) is resolved against the global URI
        local = Path(mlflow.artifacts.download_artifacts(
            version.source, dst_path=str(folder), tracking_uri=tracking_uri, registry_uri=tracking_uri
        ))  # fmt: skip
    verify(local, version.tags, f"{name} version {version.version}")
    return local, version


@dataclass(frozen=True)
class VersionRow:
    version: str
    aliases: tuple[str, ...]
    tags: dict[str, str]
    run_id: str

    @property
    def record(self) -> VersionTags:
        """The tags decoded: gate verdicts, metrics, provenance, promotion and rollback records."""
        return VersionTags.from_tags(self.tags)


def list_versions(model_name: str) -> list[VersionRow]:
    """Every version of `model_name`, oldest first, with its aliases. The aliases come from the
    registered model: `search_model_versions` leaves `ModelVersion.aliases` empty."""
    from mlflow.exceptions import MlflowException

    client = _client()
    try:
        by_version: dict[str, list[str]] = {}
        for alias, version in client.get_registered_model(model_name).aliases.items():
            by_version.setdefault(str(version), []).append(alias)
    except MlflowException:
        return []  # nothing registered under that name yet
    found = client.search_model_versions(f"name = '{model_name}'")
    return [
        VersionRow(str(v.version), tuple(sorted(by_version.get(str(v.version), []))), dict(v.tags), v.run_id or "")
        for v in sorted(found, key=lambda v: int(v.version))
    ]
