"""Two commands started at the same moment on a fresh Prefect home (the embedded default: a server per
command, `flows.prefect_api`, on one SQLite database) both finish, without "database is locked".
Real Prefect, real processes. The servers start one at a time (`start_lock`: two migrations of a
fresh database at once lock it); once started they share it (WAL mode, a 60 s busy timeout), and the
flows run 40 tasks each so that their writes overlap."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FLOW = """
import sys, time
from pathlib import Path
go = Path(sys.argv[1])
(go.parent / f"ready-{sys.argv[2]}").touch()
while not go.exists():
    time.sleep(0.002)
from prefect import flow, task
from flows.prefect_api import prefect_api

@task
def part(j: int) -> int:
    return j

@flow(name="concurrency-probe")
def probe(i: int) -> int:
    return sum(part(j) for j in range(40)) + i * 10

with prefect_api():
    print("result", probe(int(sys.argv[2])))
"""


def test_two_flows_started_at_once_on_a_fresh_prefect_home_both_finish(tmp_path):
    home = tmp_path / "prefect-home"  # fresh: its database is created and migrated by the first start
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PYTHONPATH=str(ROOT), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120")  # fmt: skip
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", FLOW, str(go), str(i)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in (1, 2)]  # fmt: skip
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{i}").exists() for i in (1, 2)):
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.01)
    go.touch()  # both leave the barrier at once
    outputs = [p.communicate(timeout=500) for p in procs]
    for i, (proc, (out, err)) in enumerate(zip(procs, outputs), start=1):
        assert proc.returncode == 0, err[-3000:]
        assert f"result {780 + i * 10}" in out
        assert "database is locked" not in err, err[-3000:]
    assert (home / "prefect.db").is_file()


def test_the_start_lock_makes_a_second_command_wait_and_then_says_which_file_it_waited_for(tmp_path):
    from filelock import FileLock
    from prefect.settings import PREFECT_HOME, temporary_settings

    from flows.prefect_api import PrefectServerError, start_lock

    with temporary_settings({PREFECT_HOME: str(tmp_path / "home")}):
        held = FileLock(str(tmp_path / "home" / "prefect.db.start.lock"))
        with start_lock():  # the same process may not take it twice: a second lock object is another command
            pass
        held.acquire()
        try:
            started = time.monotonic()
            with pytest.raises(PrefectServerError, match=r"prefect\.db\.start\.lock: another command"):
                with start_lock(timeout=0.5):
                    pass
            assert time.monotonic() - started >= 0.5
        finally:
            held.release()
        with start_lock(timeout=0.5):  # free again once the other command let go
            pass
