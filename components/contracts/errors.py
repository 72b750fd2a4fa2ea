"""`UserError`: the family of errors a user can act on (bad params, data, paths, names; a missing
server or package; NaN/inf in training). The CLI prints them as one line with exit code 2; any
other exception is a bug and keeps its traceback.

Each concrete error also derives from the builtin it always was (ValueError, FileNotFoundError,
RuntimeError, FloatingPointError), so callers that catch those keep working.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or environment, named in the message; never a programming error."""


class Preempted(Exception):
    """Training stopped by a signal (SIGTERM, SIGINT) after saving a resumable state; the message says
    where and how to continue. Not a user error and not a bug: the CLI exits 128 + the signal number."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
