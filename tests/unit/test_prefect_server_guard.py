"""A command's Prefect server dies with the process that started it (`flows.prefect_api`): the
guard stops its command once that process is gone, even after `kill -9`, and passes exit codes on.
Real processes, no Prefect (tests/integration/test_prefect_server_dies.py runs a real flow)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from flows import prefect_api
from tests.conftest import ROOT

# a "groupwise" process that starts a guarded command, prints the command's pid and waits
STARTER = """
import subprocess, sys, time
from flows.prefect_api import guarded_command
guard = subprocess.Popen(guarded_command([sys.executable, "-c", "import time; time.sleep(600)"]))
def command():  # the guard's child once it runs the command (not while it is the guard's fork)
    children = __import__("psutil").Process(guard.pid).children()
    return children[0] if children and "time.sleep(600)" in " ".join(children[0].cmdline()) else None
while (child := command()) is None:
    time.sleep(0.05)
print(guard.pid, child.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int, timeout: float) -> bool:
    """The process has ended: reaped, or a zombie (ended; its reaping is up to whoever adopted it,
    which in a container may be a PID 1 that never reaps)."""
    try:
        process = psutil.Process(pid)
        deadline = time.monotonic() + timeout
        while process.status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
    except psutil.NoSuchProcess:
        pass
    return True


def test_kill_9_of_the_starter_stops_the_guarded_command():
    starter = subprocess.Popen([sys.executable, "-c", STARTER], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        guard, command = map(int, starter.stdout.readline().split())
        assert psutil.Process(command).is_running()
        os.kill(starter.pid, signal.SIGKILL)
        assert _gone(command, 10), "the command outlived the process that started it"
        assert _gone(guard, 10)
    finally:
        starter.kill()
        starter.wait()


def test_kill_9_of_the_guard_stops_the_command_too():
    starter = subprocess.Popen([sys.executable, "-c", STARTER], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        guard, command = map(int, starter.stdout.readline().split())
        os.kill(guard, signal.SIGKILL)  # as flows.prefect_api does when SIGTERM takes over 10 s
        assert _gone(command, 10)
    finally:
        starter.kill()
        starter.wait()


def test_the_guard_passes_the_exit_code_on_and_stops_on_sigterm():
    """`prefect server start` exits with 3 when its port is taken, and flows.prefect_api chooses another."""
    code = subprocess.run(prefect_api.guarded_command([sys.executable, "-c", "raise SystemExit(3)"]), cwd=ROOT)
    assert code.returncode == 3
    guard = subprocess.Popen(prefect_api.guarded_command([sys.executable, "-c", "import time; time.sleep(600)"]), cwd=ROOT)
    while not (children := psutil.Process(guard.pid).children()) or "time.sleep(600)" not in " ".join(children[0].cmdline()):
        time.sleep(0.05)
    guard.terminate()  # flows.prefect_api at the command's end
    guard.wait(10)
    assert _gone(children[0].pid, 1)


def test_the_command_s_server_is_started_with_flags_prefect_s_cli_has():
    """flows.prefect_api starts `prefect server start` through Prefect's public CLI; every flag it passes is
    one that CLI documents (this fails on the first Prefect version that drops one)."""
    command = prefect_api.server_command(4200)
    assert command[:5] == [sys.executable, "-m", "prefect", "server", "start"]
    shown = subprocess.run([*command[:5], "--help"], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    for flag in (part for part in command[5:] if part.startswith("--")):
        assert flag in shown.stdout, f"`prefect server start` no longer takes {flag}"
