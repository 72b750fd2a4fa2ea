"""Prefect's temporary API server dies with the process that started it.

Without PREFECT_API_URL, Prefect runs a flow against a temporary API server (`uvicorn` in a child
process) and stops it at exit. A `kill -9` of `groupwise retrain` skips that exit, and the server
kept running and listening. Here the server's command runs under a guard,
`python -m flows.prefect_guard PID -- CMD...` (`flows.prefect_guard`), which stops it once
process PID, this one, is gone.

`guard_temporary_server()` puts the guard into Prefect's server module: at once when it is already
imported, else when it is first imported (a meta path hook, so that commands that run no flow do not
pay for importing Prefect). `flows/__init__.py` calls it: every groupwise flow gets it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import subprocess
import sys
from typing import Any

SERVER_MODULE = "prefect.server.api.server"  # defines SubprocessASGIServer, which Popens uvicorn


def guarded_command(command: list[str], parent: int | None = None) -> list[str]:
    """`command` run under the guard, tied to process `parent` (default: this one)."""
    return [sys.executable, "-m", "flows.prefect_guard", str(parent or os.getpid()), "--", *command]


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
