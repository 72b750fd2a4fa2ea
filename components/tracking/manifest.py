"""A model version's SHA-256 manifest: every file of its logged model (code, adapter, MLmodel).

A groupwise model version runs the code stored with it (MLflow models-from-code: `code/components`
is imported when the version loads), so whoever can write the artifact store can run code on
every machine that loads the model. The manifest — relative path -> SHA-256 of each file — is
recorded at registration as tags of the version, in the tracking database (a store separate from
the artifacts), and `load_verified` checks a downloaded copy against it *before* MLflow imports
anything, then loads that same verified copy.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Mapping

from components.contracts.errors import UserError
from components.hashing import file_sha256

MANIFEST_DIGEST_TAG = "groupwise.manifest_sha256"
MANIFEST_PART_TAG = "groupwise.manifest.{}"  # the manifest JSON, cut into tag-sized parts
PART_CHARS = 4000  # under MLflow's tag value limit (5000 on some stores)


class ManifestError(UserError, ValueError):
    """A model version's files differ from the manifest recorded when it was registered."""


def manifest_of(model_dir: Path) -> dict[str, str]:
    root = Path(model_dir)
    return {p.relative_to(root).as_posix(): file_sha256(p) for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def digest(manifest: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(sorted(manifest.items())), separators=(",", ":")).encode()).hexdigest()


def manifest_tags(manifest: Mapping[str, str]) -> dict[str, str]:
    text = json.dumps(dict(sorted(manifest.items())), separators=(",", ":"))
    parts = {MANIFEST_PART_TAG.format(i): text[start : start + PART_CHARS] for i, start in enumerate(range(0, len(text), PART_CHARS))}
    return {MANIFEST_DIGEST_TAG: digest(manifest), **parts}


def recorded_manifest(tags: Mapping[str, str]) -> dict[str, str] | None:
    parts, i = [], 0
    while MANIFEST_PART_TAG.format(i) in tags:
        parts.append(tags[MANIFEST_PART_TAG.format(i)])
        i += 1
    if not parts:
        return None
    manifest = json.loads("".join(parts))
    if digest(manifest) != tags.get(MANIFEST_DIGEST_TAG):
        raise ManifestError("the recorded manifest tags do not match their own digest (tags edited)")
    return manifest


def verify(model_dir: Path, tags: Mapping[str, str], what: str) -> None:
    """Raise ManifestError naming the files added, removed or changed since registration."""
    recorded = recorded_manifest(tags)
    if recorded is None:
        raise ManifestError(f"{what}: no manifest recorded (registered before manifests; re-register it)")
    found = manifest_of(model_dir)
    changed = sorted(p for p in recorded.keys() & found.keys() if recorded[p] != found[p])
    added, removed = sorted(found.keys() - recorded.keys()), sorted(recorded.keys() - found.keys())
    if changed or added or removed:
        problems = [f"{label} {files[:5]}{' ...' if len(files) > 5 else ''}"
                    for label, files in (("changed", changed), ("added", added), ("removed", removed)) if files]  # fmt: skip
        raise ManifestError(f"{what}: files differ from the manifest recorded at registration: {'; '.join(problems)}; refusing to load")
