"""`kill -9` of a process running a flow on Prefect's temporary server: the server stops listening
(it kept running before `flows.prefect_server` guarded it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FLOW = """
import sys, time
import flows  # what every groupwise command imports
from prefect import flow

@flow
def waits():
    from prefect.server.api.server import SubprocessASGIServer
    print("PORT", SubprocessASGIServer().port, flush=True)
    time.sleep(600)

waits()
"""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_the_temporary_prefect_server_dies_with_a_killed_flow_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # the temporary server
    log = tmp_path / "flow.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", FLOW], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=out, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PORT "), log.read_text()[-3000:]
        port = int(line.split()[1])
        assert _listening(port)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert not _listening(port), f"the temporary server on port {port} outlived its flow process"
    finally:
        proc.kill()
        proc.wait()
