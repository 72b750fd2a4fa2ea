"""A temporary Prefect server dies with the process that started it (`flows.prefect_server`): the
guard stops its command once that process is gone, even after `kill -9`, and passes exit codes on.
Real processes, no Prefect (tests/integration/test_prefect_server_dies.py runs a real flow)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from flows import prefect_server
from tests.conftest import ROOT

# a "groupwise" process that starts a guarded command, prints the command's pid and waits
STARTER = """
import subprocess, sys, time
from flows.prefect_server import guarded_command
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
        os.kill(guard, signal.SIGKILL)  # as Prefect's stop() does when SIGTERM takes over 5 s
        assert _gone(command, 10)
    finally:
        starter.kill()
        starter.wait()


def test_the_guard_passes_the_exit_code_on_and_stops_on_sigterm():
    """Prefect reads exit code 3 of its server as "port taken" and retries on another port."""
    code = subprocess.run(prefect_server.guarded_command([sys.executable, "-c", "raise SystemExit(3)"]), cwd=ROOT)
    assert code.returncode == 3
    guard = subprocess.Popen(prefect_server.guarded_command([sys.executable, "-c", "import time; time.sleep(600)"]), cwd=ROOT)
    while not (children := psutil.Process(guard.pid).children()) or "time.sleep(600)" not in " ".join(children[0].cmdline()):
        time.sleep(0.05)
    guard.terminate()  # Prefect's stop()
    guard.wait(10)
    assert _gone(children[0].pid, 1)


def test_prefect_servers_module_popens_through_the_guard():
    pytest.importorskip("prefect")
    import prefect.server.api.server as server_module

    import flows  # noqa: F401  (installs the guard)

    prefect_server.guard_temporary_server()  # idempotent
    assert server_module.subprocess.Popen is prefect_server._GuardedPopen
    assert server_module.subprocess.TimeoutExpired is subprocess.TimeoutExpired


def test_the_prefect_internals_the_guard_replaces_are_still_there():
    """The guard swaps the `subprocess` module that Prefect's server module uses to start uvicorn; Prefect
    has no supported hook for the temporary server's command. This fails on the first Prefect version
    where that module no longer starts the server through `subprocess.Popen` (then the guard would
    silently do nothing, and a killed flow would leave its server listening)."""
    import importlib
    import inspect

    module = importlib.import_module(prefect_server.SERVER_MODULE)
    prefect_server.guard_temporary_server()
    assert isinstance(module.subprocess, prefect_server._GuardedSubprocess), "the guard is not installed"
    source = inspect.getsource(module.SubprocessASGIServer._run_uvicorn_command)
    assert "subprocess.Popen(" in source, "Prefect no longer starts its temporary server with subprocess.Popen"
    assert module.subprocess.Popen is prefect_server._GuardedPopen
