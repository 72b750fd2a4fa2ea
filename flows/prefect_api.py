"""The Prefect API a groupwise command's flows run against.

With PREFECT_API_URL set (a server of one's own; `infra/` runs one), that server. Without it, a
server for this command alone, started through Prefect's public interface: `prefect server start`
(the webserver only: no services, no UI) on a free local port, run under the guard
(`flows.prefect_guard`) so that it stops once this process is gone, even after `kill -9`, and
stopped when the command ends. The flows see it through the PREFECT_API_URL setting
(`prefect.settings.temporary_settings`), as they would see a server of one's own.

Two commands started at once share one SQLite database in PREFECT_HOME. Each server migrates it as
it starts (Alembic, in the webserver's lifespan), and two migrations of a fresh database at once end
in "database is locked" however long SQLite's busy timeout: so the servers start one at a time, under a
file lock beside the database (`start_lock`), held until the server answers. Once started, they share
the database safely (WAL mode, Prefect's 60 s busy timeout).

Prefect's ephemeral mode would start the same webserver on its own, but from a private module whose
server outlives a killed process; this module is what every `groupwise` command that runs a flow
enters instead (`flows.cli`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from components.contracts.errors import UserError

STARTUP_SECONDS = float(os.environ.get("GROUPWISE_PREFECT_STARTUP_SECONDS", "90"))  # a busy 2-core machine
HOST = "127.0.0.1"
PORT_TAKEN = 3  # `prefect server start`'s exit code when the port is in use
STOP_SECONDS = 10.0


class PrefectServerError(UserError, RuntimeError):
    """The command's own Prefect server did not start (the message ends with its log)."""


def guarded_command(command: list[str], parent: int | None = None) -> list[str]:
    """`command` run under the guard, tied to process `parent` (default: this one)."""
    return [sys.executable, "-m", "flows.prefect_guard", str(parent or os.getpid()), "--", *command]


def server_command(port: int) -> list[str]:
    """Prefect's own CLI, as `prefect server start` runs it: the webserver on `port`, nothing else."""
    return [sys.executable, "-m", "prefect", "server", "start", "--host", HOST, "--port", str(port),
            "--no-services", "--no-ui", "--analytics-off"]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()  # the guard stops the server, then exits
        try:
            server.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@contextmanager
def start_lock(timeout: float = 3 * STARTUP_SECONDS) -> Iterator[None]:
    """Hold PREFECT_HOME's start lock (`prefect.db.start.lock`): one server at a time starts and migrates
    the database. PrefectServerError when another command held it longer than `timeout`."""
    from filelock import FileLock, Timeout
    from prefect.settings import get_current_settings

    home = Path(get_current_settings().home)
    home.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(home / "prefect.db.start.lock"), timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise PrefectServerError(
            f"{home / 'prefect.db.start.lock'}: another command's Prefect server held it for {timeout:.0f} s while "
            "starting; set GROUPWISE_PREFECT_STARTUP_SECONDS to wait longer"
        ) from None
    try:
        yield
    finally:
        lock.release()


def _start(log: Path) -> tuple[subprocess.Popen, str]:
    """A guarded `prefect server start` and its API URL once it answers; PrefectServerError otherwise."""
    for _attempt in range(3):  # a port taken between choosing it and binding it: choose again
        port = _free_port()
        url = f"http://{HOST}:{port}/api"
        with log.open("ab") as out:
            server = subprocess.Popen(guarded_command(server_command(port)), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline and server.poll() is None:
            if _healthy(url):
                return server, url
            time.sleep(0.25)
        code = server.poll()
        _stop(server)
        if code != PORT_TAKEN:
            break
    tail = log.read_text(errors="replace")[-1500:].strip()
    what = f"exited with {code}" if code is not None else f"did not answer within {STARTUP_SECONDS:.0f} s"
    raise PrefectServerError(
        f"the Prefect server for this command (`prefect server start`) {what}; set PREFECT_API_URL to a running "
        f"server, or GROUPWISE_PREFECT_STARTUP_SECONDS to wait longer. Its log: {tail}"
    )


@contextmanager
def prefect_api() -> Iterator[str]:
    """The API URL the flows run against inside the block: PREFECT_API_URL's, else this command's own server."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    configured = PREFECT_API_URL.value()
    if configured:
        yield configured
        return
    with tempfile.TemporaryDirectory(prefix="groupwise-prefect-") as folder:
        with start_lock():
            server, url = _start(Path(folder) / "server.log")
        try:
            with temporary_settings({PREFECT_API_URL: url}):
                try:
                    yield url
                finally:
                    _send_pending()
        finally:
            _stop(server)


def _send_pending(timeout: float = STOP_SECONDS) -> None:
    """Send the log lines and events Prefect still holds (its workers send them in batches, every
    PREFECT_LOGGING_TO_API_BATCH_INTERVAL seconds) while the server still answers: after it stops,
    they would be retried at exit until "Error logging to API" gives up."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=timeout)
