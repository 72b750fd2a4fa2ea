"""Real servers on loopback for integration tests: PostgreSQL, `mlflow server`, `prefect server`,
`groupwise serve`.

Each helper starts a real process on 127.0.0.1 on a free port, waits until it answers, and stops it
(and only it) on exit. PostgreSQL comes from Debian's packages (`initdb`/`pg_ctl`, run as the
`postgres` user when the tests run as root); without them the MLflow server uses SQLite.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

BIN = Path(sys.executable).parent
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url}: no answer within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """Stop one process we started (its own process group: the server and its workers)."""
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)


def _pg_bin(name: str) -> str | None:
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).is_file():
            return str(folder / name)
    return shutil.which(name)


def postgres_available() -> bool:
    if not (_pg_bin("initdb") and _pg_bin("pg_ctl")):
        return False
    if os.geteuid() == 0:  # postgres refuses to run as root: needs the Debian `postgres` user
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return False
    try:
        import psycopg2  # noqa: F401  (the driver MLflow's SQLAlchemy store needs)
    except ImportError:
        return False
    return True


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_server() -> Iterator[str]:
    """A throw-away PostgreSQL cluster on loopback; yields a SQLAlchemy URI of database `mlflow`."""
    folder = Path(tempfile.mkdtemp(prefix="groupwise-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", free_port()
    subprocess.run(
        _as_postgres([_pg_bin("initdb"), "-D", str(data), "-U", "mlflow", "--auth=trust", "-E", "UTF8"]),
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    options = f"-c listen_addresses={LOOPBACK} -p {port} -k {folder} -c fsync=off"
    subprocess.run(
        _as_postgres([_pg_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"]),
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    try:
        subprocess.run(
            [_pg_bin("createdb") or "createdb", "-h", LOOPBACK, "-p", str(port), "-U", "mlflow", "mlflow"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        yield f"postgresql+psycopg2://mlflow@{LOOPBACK}:{port}/mlflow"
    finally:
        subprocess.run(_as_postgres([_pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "stop"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def http_server(argv: list[str], health_url: str, log: Path, env: dict[str, str]) -> Iterator[None]:
    """Run `argv` in its own process group (output to `log`) until the block ends; enter the block
    once `health_url` answers 200."""
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_http(health_url, proc, 120, log)
        yield
    finally:
        stop(proc)


@contextmanager
def mlflow_server(backend_uri: str, artifacts: Path, port: int | None = None) -> Iterator[str]:
    """`mlflow server` on loopback (artifacts proxied through the server); yields its URL."""
    port = port or free_port()
    artifacts.mkdir(parents=True, exist_ok=True)
    url = f"http://{LOOPBACK}:{port}"
    argv = [str(BIN / "mlflow"), "server", "--host", LOOPBACK, "--port", str(port), "--workers", "1",
            "--backend-store-uri", backend_uri, "--artifacts-destination", str(artifacts)]  # fmt: skip
    # no background job runner (GenAI jobs): 5 idle worker processes this suite does not use
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with http_server(argv, f"{url}/health", artifacts.parent / f"mlflow-server-{port}.log", env):
        yield url


@contextmanager
def prefect_server(home: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`prefect server start` on loopback with its own PREFECT_HOME; yields PREFECT_API_URL."""
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    server_env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        # create scheduled runs within seconds of a deployment appearing (default loop: 60 s)
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        **(env or {}),
    }
    server_env.pop("PREFECT_API_URL", None)
    url = f"http://{LOOPBACK}:{port}/api"
    argv = [str(BIN / "prefect"), "server", "start", "--host", LOOPBACK, "--port", str(port)]
    with http_server(argv, f"{url}/health", home / "server.log", server_env):
        yield url


class DelayedProxy:
    """A TCP forwarder on loopback to a real server that starts listening only after `down_for`
    seconds: until then connections are refused, as while a tracking server restarts. Test
    equipment, not a fake: every byte goes to and from the real server."""

    def __init__(self, target_port: int, down_for: float) -> None:
        import threading

        self.port, self.target_port, self.down_for = free_port(), target_port, down_for
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def __enter__(self) -> "DelayedProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _serve(self) -> None:
        import threading

        if self._stop.wait(self.down_for):
            return
        with socket.socket() as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((LOOPBACK, self.port))
            listener.listen(16)
            listener.settimeout(0.2)
            while not self._stop.is_set():
                try:
                    client, _ = listener.accept()
                except socket.timeout:
                    continue
                upstream = socket.create_connection((LOOPBACK, self.target_port))
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()


@contextmanager
def groupwise_serve(params_file: Path | str, alias: str, log: Path, timeout: float = 600) -> Iterator[str]:
    """`groupwise serve --alias ALIAS` (vLLM's OpenAI server on the merged export) on a free port:
    yields its URL once it answers; stops it on exit. The log goes to a file: a full pipe would block it."""
    from components.generation.serve import wait_until_ready

    port = free_port()
    with Path(log).open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "serve", "--alias", alias, "--port", str(port), "--params", str(params_file)],
            env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            url = f"http://{LOOPBACK}:{port}"
            try:
                wait_until_ready(url, process, timeout=timeout)
            except (RuntimeError, TimeoutError) as exc:
                raise AssertionError(f"{exc}\n{Path(log).read_text()[-4000:]}") from None
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
    assert process.returncode is not None
