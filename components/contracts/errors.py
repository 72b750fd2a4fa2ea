"""`UserError`: the family of errors a user can act on (bad params, data, paths, names; a missing
server or package; NaN/inf in training). The CLI prints them as one line with exit code 2; any
other exception is a bug and keeps its traceback.

Each concrete error also derives from the builtin it always was (ValueError, FileNotFoundError,
RuntimeError, FloatingPointError), so callers that catch those keep working.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or environment, named in the message; never a programming error."""
