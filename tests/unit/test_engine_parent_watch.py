"""The vLLM engine's child process ends once its parent is gone, even when the parent is killed with
SIGKILL in the middle of a call (an orphaned engine would hold its memory, and a GPU, for no one).
Real processes: a parent that spawns a child the way `VllmProcess` does, then is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the parent: a spawned child that arms the watch as `_serve` does, then "generates" for ten minutes
PARENT = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    sys.path.insert(0, sys.argv[1])

    def child(parent):
        from components.generation.vllm_process import _exit_with_parent
        _exit_with_parent(parent)
        time.sleep(600)

    if __name__ == "__main__":
        process = multiprocessing.get_context("spawn").Process(target=child, args=(os.getpid(),))
        process.start()
        print(process.pid, flush=True)
        time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is gone: it only waits for its new parent to reap it
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_the_engine_child_ends_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(ROOT)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the engine child outlived its killed parent"
