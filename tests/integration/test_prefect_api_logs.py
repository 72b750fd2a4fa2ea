"""A command's own Prefect server stops only after the flow's last log lines have reached it
(`flows.prefect_api`): Prefect's workers send logs and events in batches, and a batch still held when
the server stops is retried at exit until Prefect prints "Error logging to API". Real Prefect, a real
process, with a batch interval longer than the flow so that its lines are surely still held at the end."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FLOW = """
import time
from prefect import flow, get_run_logger
from flows.prefect_api import prefect_api

@flow(name="last-words")
def last_words() -> str:
    get_run_logger().info("the flow's last line")
    return "done"

with prefect_api():
    result = last_words()
print(result, time.monotonic(), flush=True)
"""


def test_the_flow_s_last_log_lines_are_sent_before_its_server_stops(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_TO_API_BATCH_INTERVAL="120")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", FLOW], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Error logging to API" not in proc.stderr, proc.stderr[-3000:]
    word, printed = proc.stdout.split()[-2:]
    assert word == "done" and ended - float(printed) < 10  # nothing left to retry at exit
