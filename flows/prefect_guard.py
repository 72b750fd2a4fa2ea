"""The guard of a temporary Prefect server: `python -m flows.prefect_guard PID -- CMD...`.

A single-threaded parent that starts CMD with a parent-death signal (Linux: SIGTERM once the guard
is gone, however it ends) and stops CMD (SIGTERM, then SIGKILL) once process PID is gone (polled)
or when the guard itself is told to stop (`flows.prefect_api`, at the command's end). It exits with CMD's code
(`prefect server start` exits with 3 when its port is taken). `flows.prefect_api` runs the server under it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

POLL_SECONDS = 0.5  # how often the guard looks for its parent
STOP_SECONDS = 5.0  # SIGTERM, then SIGKILL after this long
_PR_SET_PDEATHSIG = 1


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
    stop_asked: list[int] = []  # the handlers come before the server: a SIGTERM right after it starts stops it too

    def on_signal(signum: int, frame: Any) -> None:
        stop_asked.append(signum)
        if server is not None:
            _stop(server)

    server: subprocess.Popen | None = None
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = subprocess.Popen(command, preexec_fn=_dies_with_guard())
    if stop_asked:
        _stop(server)
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
        print("usage: python -m flows.prefect_guard PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    return guard(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
