"""SHA-256 of files, streamed: the one file hasher of provenance, bindings, manifests, data tags,
and validation reports. Two recipes, each the one its digests were always made with (they are
recorded in registered versions, metrics.json and validation reports):

- `file_sha256(path)`: the file's bytes.
- `files_sha256(paths)` (`folder_files_sha256`: of a folder's own files): in sorted order, each file's name, then its bytes. With `absent_ok`, a
  missing file is hashed as absent instead of failing; every file is then framed as
  ``name:size:`` before its bytes, size -1 for an absent one, so that an absent file and an empty
  one differ (the groups files of a validation report).

Standard library only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

CHUNK = 1 << 20
ABSENT = -1  # the size an absent file is hashed with (`files_sha256(..., absent_ok=True)`)


def _update(digest, path: Path) -> None:
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    _update(digest, Path(path))
    return digest.hexdigest()


def files_sha256(paths: Iterable[Path], absent_ok: bool = False) -> str:
    """One digest over files, by name and content, in sorted order (`absent_ok`: see the module docstring)."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        if not absent_ok:
            digest.update(path.name.encode())
            _update(digest, path)
            continue
        present = path.is_file()
        digest.update(f"{path.name}:{path.stat().st_size if present else ABSENT}:".encode())
        if present:
            _update(digest, path)
    return digest.hexdigest()


def folder_files_sha256(folder: Path) -> str:
    """`files_sha256` of the files directly in `folder` (its subfolders left out): an adapter's hash,
    as metrics.json's binding, the registration fingerprint and the LoggedModel tag record it."""
    return files_sha256([p for p in Path(folder).iterdir() if p.is_file()])
