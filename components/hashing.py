"""SHA-256 of files, streamed: the one hasher of provenance, bindings, manifests and data tags."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20


def _update(digest, path: Path) -> None:
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    _update(digest, Path(path))
    return digest.hexdigest()


def files_sha256(paths: list[Path]) -> str:
    """One digest over files, by name and content, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        digest.update(path.name.encode())
        _update(digest, path)
    return digest.hexdigest()
