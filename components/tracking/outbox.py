"""What a long step logs survives a tracking server's restart (`Outbox`).

Training logs each step's metrics for hours; a tracking server restarted meanwhile (an upgrade, a
rescheduled pod) must neither stop training nor lose what was logged while it was away. MLflow's
client alone does neither: a request to a server that is down is retried on its own schedule
(`MLFLOW_HTTP_REQUEST_MAX_RETRIES`: minutes, the caller blocked) and then raises, and its async
logging drops a batch whose retries failed. So an outbox, written here:

- each record is sent at once while the server accepts connections (a TCP probe of at most
  `probe_timeout` s first, so a server that is down costs milliseconds, not MLflow's retries);
- while it does not, or a send fails with a transient fault (`runs.is_transient`), records queue
  in order, and go out, oldest first, as soon as it answers again;
- records carry their run id and the time they were measured, so they land in their run, at
  their time, whenever they are sent;
- `close(budget)` waits at most `budget` s (`tracking.outage_seconds`) for the server and sends
  the rest, or stops in one line saying how many records were not sent.

A local store (SQLite) has no server to lose: records go straight through.
"""

from __future__ import annotations

import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from components.tracking import runs


class Outbox:
    """Records of run `run_id` on the tracking store `uri`, sent now or, while its server is away, later."""

    def __init__(self, uri: str, run_id: str, probe_timeout: float = 2.0) -> None:
        from mlflow import MlflowClient

        self.uri, self.run_id, self.probe_timeout = uri, run_id, probe_timeout
        self._client = MlflowClient(tracking_uri=uri)
        self._address = runs._address(uri) if runs.is_server(uri) else None
        self._queue: deque[tuple[str, Callable[[], None]]] = deque()
        self.sent_late = 0  # records that waited for the server (reported, and tested)
        self._away = False  # an outage is under way

    @property
    def pending(self) -> int:
        return len(self._queue)

    def _reachable(self) -> bool:
        if self._address is None:
            return True
        try:
            socket.create_connection(self._address, timeout=self.probe_timeout).close()
            return True
        except OSError:
            return False

    def _say(self, text: str) -> None:
        print(f"[tracking] {self.uri}: {text}", file=sys.stderr, flush=True)

    def _send(self, what: str, call: Callable[[], None]) -> None:
        self._queue.append((what, call))
        self.flush()

    def flush(self) -> bool:
        """Send what is queued, oldest first, while the server answers; True when nothing is left."""
        while self._queue:
            if not self._reachable():
                return self._stalled()
            what, call = self._queue[0]
            try:
                call()
            except Exception as exc:
                if not runs.is_transient(exc):
                    raise
                return self._stalled()
            self._queue.popleft()
            self.sent_late += self._away
        if self._away:
            self._away = False
            self._say(f"back: the records kept while it was away are sent ({self.sent_late} so far)")
        return True

    def _stalled(self) -> bool:
        if not self._away:  # the first record of an outage: said once
            self._away = True
            self._say("not answering: training goes on, its records are kept here and sent once it is back")
        return False

    def metrics(self, metrics: Mapping[str, Any], step: int | None = None, prefix: str = "") -> None:
        """Every finite number of `metrics` (`runs.metric_numbers`), stamped now."""
        batch = runs.metric_batch(metrics, prefix, step)
        if batch:
            self._send("metrics", lambda: self._client.log_batch(self.run_id, metrics=batch))

    def tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)) for k, v in tags.items()]
        self._send("tags", lambda: self._client.log_batch(self.run_id, tags=batch))

    def table(self, rows: list[Mapping[str, Any]], artifact_file: str) -> None:
        """A table (row dicts) as an MLflow table artifact of the run."""
        if rows:
            import pandas as pd

            frame = pd.DataFrame(rows)
            self._send("table", lambda: self._client.log_table(self.run_id, frame, artifact_file))

    def artifacts(self, paths: list[Path], artifact_path: str | None = None) -> None:
        """Files and folders (each under its own name) as artifacts; they must stay until sent."""
        for path in map(Path, paths):
            if path.is_dir():
                where = f"{artifact_path}/{path.name}" if artifact_path else path.name
                self._send("artifacts", lambda path=path, where=where: self._client.log_artifacts(self.run_id, str(path), where))
            elif path.is_file():
                self._send("artifact", lambda path=path: self._client.log_artifact(self.run_id, str(path), artifact_path))

    def close(self, budget: float) -> None:
        """Send the rest, waiting at most `budget` s in all for the server; one-line error otherwise."""
        deadline = time.monotonic() + budget
        while not self.flush():
            left = deadline - time.monotonic()
            if left <= 0:
                raise runs.TrackingUnavailableError(
                    f"tracking server {self.uri} did not come back within {budget:.0f} s (tracking.outage_seconds): "
                    f"{self.pending} record(s) of run {self.run_id} not sent; the step's outputs on disk are complete"
                )
            time.sleep(min(5.0, left))


__all__ = ["Outbox"]
