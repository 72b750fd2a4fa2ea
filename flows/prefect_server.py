"""Prefect's temporary API server dies with the process that started it.

Without PREFECT_API_URL, Prefect runs a flow against a temporary API server (`uvicorn` in a child
process) and stops it at exit. A `kill -9` of `groupwise retrain` skips that exit, and the server
kept running and listening. Here the server's command runs under a guard,
`python -m flows.prefect_server PID -- CMD...`: a single-threaded parent that starts CMD with a
parent-death signal (Linux: SIGTERM once the guard is gone, however it ends), and stops CMD
(SIGTERM, then SIGKILL) once process PID is gone (polled) or when the guard itself is told to stop
(Prefect's own `stop()`). The guard exits with CMD's code (Prefect reads 3 as "port taken").

`guard_temporary_server()` puts the guard into Prefect's server module: at once when it is already
imported, else when it is first imported (a meta path hook, so that commands that run no flow do not
pay for importing Prefect). `flows/__init__.py` calls it: every groupwise flow gets it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import signal
import subprocess
import sys
from typing import Any

SERVER_MODULE = "prefect.server.api.server"  # defines SubprocessASGIServer, which Popens uvicorn
POLL_SECONDS = 0.5  # how often the guard looks for its parent
STOP_SECONDS = 5.0  # SIGTERM, then SIGKILL after this long
_PR_SET_PDEATHSIG = 1


def guarded_command(command: list[str], parent: int | None = None) -> list[str]:
    """`command` run under the guard, tied to process `parent` (default: this one)."""
    return [sys.executable, "-m", "flows.prefect_server", str(parent or os.getpid()), "--", *command]


class _GuardedPopen(subprocess.Popen):
    """`subprocess.Popen` that runs its command under the guard."""

    def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
        super().__init__(guarded_command([str(a) for a in args]), *rest, **kwargs)


class _GuardedSubprocess:
    """The `subprocess` module as Prefect's server module sees it: Popen is `_GuardedPopen`."""

    Popen = _GuardedPopen

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


def _install(module: Any) -> None:
    if not isinstance(module.subprocess, _GuardedSubprocess):
        module.subprocess = _GuardedSubprocess()


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when Prefect's server module is imported, guards it once loaded."""

    def find_spec(self, name: str, path: Any, target: Any = None):
        if name != SERVER_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            load = spec.loader.exec_module

            def exec_module(module: Any) -> None:
                load(module)
                _install(module)

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def guard_temporary_server() -> None:
    """Make every temporary Prefect server this process starts die with it (idempotent)."""
    if SERVER_MODULE in sys.modules:
        _install(sys.modules[SERVER_MODULE])
    elif not any(isinstance(finder, _InstallOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())


# ---- the guard process ------------------------------------------------------------------------


def _dies_with_guard():
    """A preexec_fn for the server (Linux): SIGTERM once the guard, its parent, is gone; a guard
    that died before that was set ends the server at once. None elsewhere."""
    if sys.platform != "linux":
        return None
    import ctypes

    prctl, guard_pid = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()  # loaded before the fork

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != guard_pid:
            os._exit(1)

    return preexec


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def guard(parent: int, command: list[str]) -> int:
    """Run `command` until it exits, `parent` is gone or the guard gets SIGTERM/SIGINT; its exit code."""
    server = subprocess.Popen(command, preexec_fn=_dies_with_guard())

    def on_signal(signum: int, frame: Any) -> None:
        _stop(server)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while server.poll() is None:
        if os.getppid() != parent:  # reparented: the process that started the server died
            _stop(server)
            break
        try:
            server.wait(POLL_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    return server.returncode


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not argv[0].isdigit() or argv[1] != "--":
        print("usage: python -m flows.prefect_server PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    return guard(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
