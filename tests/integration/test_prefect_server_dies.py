"""A groupwise command's own Prefect server (`prefect server start`, `flows.prefect_api`): its flows run
against it, it stops when the command ends, and after a `kill -9` of the command it stops listening."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FLOW = """
import sys, time
from urllib.parse import urlparse
from prefect import flow, get_client
from flows.prefect_api import prefect_api  # what `groupwise retrain` and `groupwise study` enter

@flow
def waits(url):
    with get_client(sync_client=True) as client:  # this flow run is on the command's own server
        assert client.api_url.host == urlparse(url).hostname and client.read_flow_runs()
    print("PORT", urlparse(url).port, flush=True)
    time.sleep(float(sys.argv[1]))

with prefect_api() as url:
    waits(url)
print("ENDED", flush=True)
"""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextmanager
def _command(tmp_path, seconds: float):
    """The flow command above, running; (process, its server's port, its log); killed at the end."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # no server of one's own
    log = tmp_path / "flow.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", FLOW, str(seconds)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=out, text=True
        )
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), log.read_text()[-3000:]
        yield proc, int(line.split()[1]), log
    finally:
        proc.kill()
        proc.wait()


def test_the_command_s_prefect_server_stops_when_the_command_ends(tmp_path):
    with _command(tmp_path, 0) as (proc, port, log):
        assert proc.stdout.readline().strip() == "ENDED" and proc.wait(60) == 0, log.read_text()[-3000:]
        assert not _listening(port), f"the command's server on port {port} outlived the command"


def test_the_command_s_prefect_server_dies_with_a_killed_command(tmp_path):
    with _command(tmp_path, 600) as (proc, port, _log):
        assert _listening(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert not _listening(port), f"the temporary server on port {port} outlived its flow process"
