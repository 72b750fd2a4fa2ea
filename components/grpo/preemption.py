"""Preemption of a training run: SIGTERM (a Kubernetes eviction, Prefect's cancellation, `kill`) or
SIGINT (Ctrl-C) ends training with a resumable state instead of losing the run.

A signal that arrives while the step has not touched the weights yet (rollouts, rewards, scoring)
stops at once: the state saved is the one the step started from. One that arrives during the update
(forward, backward, optimizer) is held until the step ends, whose state is then saved: the wait is
bounded by one update. The trainer raises `Preempted` after the save; `--resume` continues
bit-identically (the RNG state saved is the one the saved step ended with).

A second signal while one is held stops at once (Python's default: a KeyboardInterrupt), for
a user who will not wait; the state of the last save_every step is still there.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

from components.contracts.errors import Preempted

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Abort(BaseException):
    """Raised by the handler inside an abortable section; the section turns it into the stop request."""


class StopRequests:
    """Handlers for SIGTERM and SIGINT for the duration of a `with` block (main thread only;
    elsewhere nothing is installed and `requested` stays None)."""

    def __init__(self) -> None:
        self.requested: int | None = None  # the signal number, once one came
        self._abortable = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @property
    def name(self) -> str:
        return signal.Signals(self.requested).name if self.requested is not None else ""

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is not None:  # asked twice: stop now
            raise KeyboardInterrupt(f"{signal.Signals(signum).name} again: stopped without waiting for the step")
        self.requested = signum
        if self._abortable:
            raise _Abort()

    @contextmanager
    def abortable(self) -> Iterator[None]:
        """A section a signal may cut short: it ends with `requested` set (and the caller checks it)."""
        self._abortable = True
        try:
            yield
        except _Abort:
            pass
        finally:
            self._abortable = False

    def held(self) -> bool:
        """True once a signal came (the caller saves its state and raises `Preempted`)."""
        return self.requested is not None


__all__ = ["Preempted", "STOP_SIGNALS", "StopRequests"]
