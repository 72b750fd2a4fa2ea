"""Which code ran: the git commit of groupwise's own source, whether that source had uncommitted
changes, and a digest of those changes.

Every MLflow run carries it under MLflow's own tag `mlflow.source.git.commit` (the runs table and
the UI show it) with `groupwise.git.dirty` and `groupwise.git.diff_sha256`; metrics.json, a study
arm's record and a registered version's tags carry the same three values.

"The code" is what the Python process imports: the repository holding this package (`CODE_PATHS`
inside it: the packages and the dependency list). A change to params.yaml or to data is not a code
change (the params hash and the data hashes record those), so a `dvc exp run`, which edits
params.yaml, or a run's own outputs, do not make the tree dirty. Outside a git checkout (groupwise
installed from a wheel) the commit is "unknown" and dirty is None: nothing can be said.

The diff digest is the SHA-256 of `git diff HEAD` over `CODE_PATHS` followed by each untracked,
non-ignored file under them (its path, then its bytes): two dirty trees with the same digest ran the
same code. Read once per process: a process runs the code it imported at its start.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

CODE_ROOT = Path(__file__).resolve().parents[1]  # the checkout that holds components/ and flows/
CODE_PATHS = ("components", "flows", "pyproject.toml")
UNKNOWN = "unknown"
COMMIT_TAG = "mlflow.source.git.commit"  # MLflow's own (mlflow.utils.mlflow_tags.MLFLOW_GIT_COMMIT)
DIRTY_TAG = "groupwise.git.dirty"
DIFF_TAG = "groupwise.git.diff_sha256"


@dataclass(frozen=True)
class CodeVersion:
    commit: str  # 40 hex digits, or "unknown"
    dirty: bool | None  # None: not a git checkout
    diff_sha256: str | None = None  # only when dirty

    def to_tags(self) -> dict[str, str]:
        """The MLflow run tags (strings): commit, dirty flag, and the diff digest when dirty."""
        tags = {COMMIT_TAG: self.commit, DIRTY_TAG: UNKNOWN if self.dirty is None else str(self.dirty).lower()}
        if self.diff_sha256:
            tags[DIFF_TAG] = self.diff_sha256
        return tags

    def to_dict(self) -> dict:
        return {"commit": self.commit, "dirty": self.dirty, "diff_sha256": self.diff_sha256}

    @property
    def short(self) -> str:
        """'1d79fe3', '1d79fe3+dirty.9f2c01ab' (the diff digest's first 8), or 'unknown'."""
        if self.commit == UNKNOWN:
            return UNKNOWN
        return self.commit[:7] + (f"+dirty.{(self.diff_sha256 or '')[:8]}" if self.dirty else "")

    @classmethod
    def from_dict(cls, data: dict | None) -> "CodeVersion | None":
        if not data:
            return None
        return cls(str(data.get("commit", UNKNOWN)), data.get("dirty"), data.get("diff_sha256"))


def _git(root: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=30, check=True).stdout


def read_code_version(root: Path = CODE_ROOT) -> CodeVersion:
    """The code version of the checkout at `root` (uncached; `code_version()` caches it per process)."""
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").decode().strip()).resolve()
        commit = _git(root, "rev-parse", "HEAD").decode().strip()
    except (OSError, subprocess.SubprocessError):
        return CodeVersion(UNKNOWN, None)
    paths = [p for p in CODE_PATHS if (top / p).exists()]
    diff = _git(top, "diff", "HEAD", "--binary", "--", *paths)
    untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z", "--", *paths).split(b"\0")
    untracked = sorted(name for name in untracked if name and not name.endswith(b".pyc"))
    if not diff and not untracked:
        return CodeVersion(commit, False)
    digest = hashlib.sha256(diff)
    for name in untracked:
        digest.update(b"\0untracked\0" + name + b"\0")
        digest.update((top / name.decode()).read_bytes())
    return CodeVersion(commit, True, digest.hexdigest())


@functools.cache
def code_version() -> CodeVersion:
    """The code this process runs (read once)."""
    return read_code_version(CODE_ROOT)
