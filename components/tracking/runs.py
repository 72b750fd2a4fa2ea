"""MLflow runs: one parent run per pipeline execution, one child run per step.

Default backend: SQLite (`sqlite:///…/mlflow.db`) with a local artifact folder; any tracking URI
works (`params.tracking.uri` or `GROUPWISE_TRACKING_URI`). A tracking server that does not accept
connections is waited for on MLflow's own retry schedule (`MLFLOW_HTTP_REQUEST_MAX_RETRIES`,
`MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR`), saying so before each wait, then refused in one line naming it.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator, Mapping

from components.code_version import code_version
from components.config import TrackingConfig
from components.contracts.errors import Preempted, UserError

OWNER_HOST, OWNER_PID = "groupwise.host", "groupwise.pid"
_CLEANED: set[tuple[str, str]] = set()  # (tracking URI, experiment id) whose orphans this process closed


def _owner_tags() -> dict[str, str]:
    """Who runs a run (a run left RUNNING whose process is gone is closed by the next one,
    `close_orphaned_runs`) and the code it runs (`components.code_version`: MLflow's
    `mlflow.source.git.commit`, the dirty flag and the diff's digest)."""
    return {OWNER_HOST: socket.gethostname(), OWNER_PID: str(os.getpid()), **code_version().to_tags()}


def _first_use_lock(uri: str, timeout: float = 300):
    """A fresh SQLite store is created and migrated by its first client: two flows starting at once
    would both migrate it (Alembic: "Online migration expected to match one row"). Serialise that
    first use with a file lock beside the database; servers serialise it themselves."""
    if not uri.startswith("sqlite:///"):
        return nullcontext()
    from filelock import FileLock

    db = Path(uri[len("sqlite:///") :])
    db.parent.mkdir(parents=True, exist_ok=True)
    return _user_timeout(FileLock(str(db.with_name(db.name + ".init.lock")), timeout=timeout), f"{db}: first use")


class TrackingLockError(UserError, TimeoutError):
    """Another process held a tracking store's lock longer than its timeout."""


@contextmanager
def _user_timeout(lock, what: str):
    """Hold `lock`; a `filelock.Timeout` becomes a `TrackingLockError` (one line at the CLI), with the
    Timeout kept as its cause so that a flow still retries it (`is_transient`)."""
    from filelock import Timeout

    try:
        lock.acquire()
    except Timeout as exc:
        raise TrackingLockError(f"{exc} ({what} is held by another process)") from exc
    try:
        yield
    finally:
        lock.release()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def close_orphaned_runs(experiment_id: str) -> list[str]:
    """Mark KILLED the runs of this experiment left RUNNING by a process of this host that is gone
    (SIGKILL, OOM, a power cut: nothing could end them); say so on stderr. Returns their ids.
    Runs of other hosts are left alone: their liveness cannot be seen from here."""
    import mlflow

    client = mlflow.MlflowClient()
    host, closed = socket.gethostname(), []
    running = client.search_runs(
        [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{OWNER_HOST}` = '{host}'", max_results=1000
    )
    for run in running:
        pid = run.data.tags.get(OWNER_PID, "")
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            client.set_tag(run.info.run_id, "groupwise.closed_because", f"process {pid} on {host} died with the run RUNNING")
            client.set_terminated(run.info.run_id, status="KILLED")
            closed.append(run.info.run_id)
            print(
                f"[tracking] run {run.info.run_id} ({run.info.run_name}) was left RUNNING by dead process {pid}: marked KILLED",
                file=sys.stderr,
            )
    return closed


class TrackingUnavailableError(UserError, ConnectionError):
    """The tracking server does not accept connections (the message names its URI). Its cause is the
    network error, so a flow still retries it (`is_transient`)."""


_BACKOFF_MAX = 120.0  # seconds: urllib3's cap on one wait, which MLflow's retries use


def server_waits() -> list[float]:
    """The waits between connection attempts: MLflow's HTTP retry schedule (its environment
    variables), so that one setting governs both."""
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR, MLFLOW_HTTP_REQUEST_MAX_RETRIES

    factor = float(MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.get())
    return [min(factor * 2**i, _BACKOFF_MAX) for i in range(int(MLFLOW_HTTP_REQUEST_MAX_RETRIES.get()))]


def _address(uri: str) -> tuple[str, int] | None:
    """(host, port) to probe for a server URI; None when requests would go through a proxy."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(uri)
    if not parts.hostname or (parts.scheme in getproxies() and not proxy_bypass(parts.hostname)):
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def within(waits: list[float], budget: float) -> list[float]:
    """The waits of MLflow's schedule that fit in `budget` seconds in all (the last one cut to fit)."""
    kept, total = [], 0.0
    for wait in waits:
        if total >= budget:
            break
        kept.append(min(wait, budget - total))
        total += kept[-1]
    return kept


def wait_for_server(uri: str, waits: list[float] | None = None, timeout: float = 5.0, budget: float | None = None) -> None:
    """Return once the tracking server at `uri` accepts a connection (at once for a local store);
    before each wait say on stderr what is waited for; at the end a `TrackingUnavailableError`.
    `budget`: seconds of waiting in all (`tracking.connect_timeout_seconds`)."""
    address = _address(uri) if is_server(uri) else None
    if address is None:
        return
    waits = server_waits() if waits is None else waits
    if budget is not None:
        waits = within(waits, budget)
        timeout = min(timeout, budget)
    for attempt, wait in enumerate([*waits, None], start=1):
        try:
            socket.create_connection(address, timeout=timeout).close()
            return
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            if wait is None:
                raise TrackingUnavailableError(
                    f"tracking server {uri} does not accept connections ({reason}; {attempt} attempt"
                    f"{'s' * (attempt > 1)} over {sum(waits):.0f} s): start it, or set GROUPWISE_TRACKING_URI / tracking.uri to one that runs"
                ) from exc
            total = f" ({sum(waits):.0f} s in all; tracking.connect_timeout_seconds bounds it)" if attempt == 1 else ""
            print(f"[tracking] waiting for the tracking server at {uri} ({reason}): attempt {attempt + 1} of "
                  f"{len(waits) + 1} in {wait:.0f} s{total}", file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(wait)


def configure(cfg: TrackingConfig) -> str:
    """Point MLflow at the tracking URI and make sure the experiment exists; returns its id. The
    first call of a process on an experiment also closes runs that dead processes left RUNNING."""
    import mlflow

    wait_for_server(cfg.uri, budget=cfg.connect_timeout_seconds)
    mlflow.set_tracking_uri(cfg.uri)
    mlflow.set_registry_uri(cfg.uri)  # else the registry may follow another thread's tracking URI
    with _first_use_lock(cfg.uri):
        experiment_id = _experiment(cfg)
    if (cfg.uri, experiment_id) not in _CLEANED:
        _CLEANED.add((cfg.uri, experiment_id))
        close_orphaned_runs(experiment_id)
    return experiment_id


def _experiment(cfg: TrackingConfig) -> str:
    import mlflow

    experiment = mlflow.get_experiment_by_name(cfg.experiment)
    if experiment is not None:
        return experiment.experiment_id
    try:
        if is_server(cfg.uri):  # the server stores (proxies) artifacts: clients need no store access
            return mlflow.create_experiment(cfg.experiment)
        cfg.artifact_location.mkdir(parents=True, exist_ok=True)
        return mlflow.create_experiment(cfg.experiment, artifact_location=cfg.artifact_location.as_uri())
    except Exception as exc:
        # Another process created it between our lookup and our create (two flows against a fresh
        # store): use theirs. Anything else, or a "duplicate" we then cannot find, is re-raised.
        if not _already_exists(exc):
            raise
        experiment = mlflow.get_experiment_by_name(cfg.experiment)
        if experiment is None:
            raise
        return experiment.experiment_id


_UNIQUE_VIOLATION = ("unique constraint", "duplicate key", "duplicate entry", "already exists")


def _already_exists(exc: BaseException) -> bool:
    """A create that lost a race: MLflow's RESOURCE_ALREADY_EXISTS (what the SQL store raises on the
    unique name, and what a server relays as a RestException), or a raw unique-constraint violation
    from the database (a store that surfaces it at commit time, e.g. as BAD_REQUEST)."""
    from mlflow.exceptions import MlflowException

    if not isinstance(exc, MlflowException):
        return False
    if exc.error_code == "RESOURCE_ALREADY_EXISTS":
        return True
    message = str(exc).lower()
    return any(marker in message for marker in _UNIQUE_VIOLATION)


def is_server(uri: str) -> bool:
    """A tracking server (http/https) rather than a local database."""
    return uri.startswith(("http://", "https://"))


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = value


def flatten(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}"""
    out: dict[str, Any] = {}
    _flatten("", mapping, out)
    return out


@contextmanager
def step_run(
    cfg: TrackingConfig,
    name: str,
    params: Mapping[str, Any] | None = None,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Start a run (a child of `parent_run_id` if given), log flattened params, yield its id."""
    import mlflow

    experiment_id = configure(cfg)
    with mlflow.start_run(
        experiment_id=experiment_id,
        run_name=name,
        nested=parent_run_id is not None,
        parent_run_id=parent_run_id,
        tags={"groupwise.step": name, **_owner_tags(), **(tags or {})},
    ) as run:
        if params:
            flat = param_strings(params)
            for start in range(0, len(flat), 90):
                mlflow.log_params(dict(list(flat.items())[start : start + 90]))
        try:
            yield run.info.run_id
        except BaseException as exc:
            if stopped_status(exc) == "KILLED":  # stopped, not failed: KILLED, as MLflow's UI shows a cancelled run
                mlflow.end_run("KILLED")
            raise


def param_strings(params: Mapping[str, Any]) -> dict[str, str]:
    """A (nested) params mapping as MLflow params: dotted names, values as strings, None as "null"."""
    return {k: (str(v) if v is not None else "null") for k, v in flatten(params).items()}


def metric_numbers(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Every finite number of a (nested) mapping, by its flattened name (dots, `prefix` first)."""
    return {
        f"{prefix}{k}".replace("/", "."): float(v)
        for k, v in flatten(metrics).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
    }


def log_metrics(metrics: Mapping[str, Any], step: int | None = None, prefix: str = "") -> None:
    """Log every finite number of a (nested) mapping; names are flattened with dots."""
    import mlflow

    numbers = metric_numbers(metrics, prefix)
    if numbers:
        mlflow.log_metrics(numbers, step=step)


def log_artifacts(paths: list[Path], artifact_path: str | None = None) -> None:
    import mlflow

    for path in paths:
        path = Path(path)
        if path.is_dir():
            mlflow.log_artifacts(str(path), artifact_path=f"{artifact_path}/{path.name}" if artifact_path else path.name)
        elif path.is_file():
            mlflow.log_artifact(str(path), artifact_path=artifact_path)


def metric_batch(metrics: Mapping[str, Any], prefix: str = "", step: int | None = None) -> list:
    """`metric_numbers` as MLflow `Metric`s stamped now (for `MlflowClient.log_batch` to a given run)."""
    from mlflow.entities import Metric

    stamp = int(time.time() * 1000)
    return [Metric(k, v, stamp, step or 0) for k, v in metric_numbers(metrics, prefix).items()]


def log_metrics_to(run_id: str, metrics: Mapping[str, Any], prefix: str = "") -> None:
    """Log the finite numbers of `metrics` (`metric_numbers`) to run `run_id` (an open parent run, not the active one)."""
    import mlflow

    batch = metric_batch(metrics, prefix)
    if batch:
        mlflow.MlflowClient().log_batch(run_id, metrics=batch)


def log_files_to(run_id: str, paths: list[Path], artifact_path: str | None = None) -> None:
    """Log the existing files of `paths` to run `run_id` (an open parent run, not the active one)."""
    import mlflow

    client = mlflow.MlflowClient()
    for path in map(Path, paths):
        if path.is_file():
            client.log_artifact(run_id, str(path), artifact_path=artifact_path)


def set_tags(tags: Mapping[str, Any]) -> None:
    import mlflow

    mlflow.set_tags({k: str(v) for k, v in tags.items()})


def start_parent_run(cfg: TrackingConfig, name: str, tags: Mapping[str, str] | None = None, parent_run_id: str | None = None) -> str:
    """Create a parent run (left open for the steps; itself a child of `parent_run_id` if given)."""
    import mlflow

    experiment_id = configure(cfg)
    client = mlflow.MlflowClient()
    extra = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
    run = client.create_run(experiment_id, run_name=name, tags={"groupwise.pipeline": name, **_owner_tags(), **extra, **(tags or {})})
    return run.info.run_id


def log_params_to(run_id: str, params: Mapping[str, Any]) -> None:
    """Every leaf of a (nested) params mapping as a param of run `run_id`, by its dotted name
    ("train.lr": "0.0003"; None as "null"), in MLflow's batches of at most 100."""
    import mlflow
    from mlflow.entities import Param

    flat = [Param(k, v) for k, v in param_strings(params).items()]
    client = mlflow.MlflowClient()
    for start in range(0, len(flat), 100):
        client.log_batch(run_id, params=flat[start : start + 100])


def close_runs_tagged(cfg: TrackingConfig, tag: str, value: str, status: str, reason: str) -> list[str]:
    """Close, as `status`, the RUNNING runs tagged `tag` = `value` and their RUNNING child runs
    (`mlflow.parentRunId`), each tagged with why (`groupwise.closed_because`); their ids."""
    import mlflow

    if not value:
        return []
    experiment_id = configure(cfg)
    client = mlflow.MlflowClient()
    closed: list[str] = []
    tagged = client.search_runs([experiment_id], f"tags.`{tag}` = '{value}'", max_results=1000)
    for parent in tagged:
        children = client.search_runs(
            [experiment_id], f"attributes.status = 'RUNNING' and tags.`mlflow.parentRunId` = '{parent.info.run_id}'", max_results=1000
        )
        for run in [*children, parent]:
            if run.info.status == "RUNNING":
                client.set_tag(run.info.run_id, "groupwise.closed_because", reason)
                client.set_terminated(run.info.run_id, status=status)
                closed.append(run.info.run_id)
    return closed


def stopped_status(exc: BaseException) -> str:
    """The status of a run ended by `exc`: KILLED for a stop from outside, else FAILED. A stop is
    `Preempted` (the trainer saved its state after SIGTERM) or any BaseException that is not an
    Exception: Ctrl-C, SystemExit, and the termination signal an orchestrator raises in a run it
    cancels (Prefect's `TerminationSignal`)."""
    return "KILLED" if isinstance(exc, Preempted) or not isinstance(exc, Exception) else "FAILED"


def end_parent_run(run_id: str, status: str = "FINISHED") -> None:
    import mlflow

    mlflow.MlflowClient().set_terminated(run_id, status=status)


def log_table(rows: list[Mapping[str, Any]], artifact_file: str) -> None:
    """A table (list of row dicts) as an MLflow table artifact (JSON, shown in the MLflow UI)."""
    import mlflow
    import pandas as pd

    if rows:
        mlflow.log_table(pd.DataFrame(rows), artifact_file=artifact_file)


_TRANSIENT_NAMES = {
    "ConnectionError",  # requests / builtins: server down or restarting
    "ConnectTimeout",
    "ReadTimeout",
    "Timeout",  # requests; also filelock's: another process held the registry lock too long
    "NewConnectionError",
    "MaxRetryError",
    "RemoteDisconnected",
    "ConnectionRefusedError",
    "ConnectionResetError",
}
_TRANSIENT_MLFLOW_CODES = {"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"}


def is_transient(exc: BaseException) -> bool:
    """A fault worth retrying: the tracking server unreachable, timing out or overloaded, a SQLite
    database locked by another writer. Walks the cause/context chain (MLflow wraps the network error).
    Bad input, missing files or failed gates are not transient."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ in _TRANSIENT_NAMES:
            return True
        if getattr(exc, "error_code", None) in _TRANSIENT_MLFLOW_CODES:
            return True
        message = str(exc)
        if "database is locked" in message or "Connection refused" in message:
            return True
        exc = exc.__cause__ or exc.__context__
    return False
