"""One way to write a file or a folder so that a reader never sees half of it.

- `atomic_write(path, write)`: `write(tmp)` fills a temporary sibling, which is made mode 0644 (a
  report or a data file is meant to be read by others; `mkstemp` creates 0600) and renamed onto
  `path` with `os.replace`, atomic on POSIX. On failure the temporary file is removed and `path`
  is untouched.
- `atomic_dir(out_dir, write)`: `write(tmp)` fills a fresh sibling folder; the old `out_dir` is
  renamed aside (`.<name>-old`), the new one (mode 0755) renamed in, then the old one removed, so there is no
  moment without a complete folder. `recover_dir` finishes a swap that a crash interrupted between
  the two renames (the folder gone, its previous version aside): it puts the previous one back.
  A symlinked `out_dir` is followed: the swap happens at the link's target and the link stays. When
  the swap itself fails, the new folder is kept and the error (`SwapError`) names where it is. The
  temporary folder's name carries its writer's pid (`.<name>-tmp-<pid>-…`): one left by a writer that
  was killed (`kill -9` runs no cleanup) is removed by the next write of the same folder.
- A full disk (ENOSPC, EDQUOT) while writing is `DiskFullError`: one line naming the path and the
  space left; the temporary file or folder is removed and the previous version is untouched.

Standard library only: every layer may use it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.contracts.errors import UserError

FILE_MODE = 0o644
DIR_MODE = 0o755  # mkdtemp creates 0700


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp)` on a temporary file next to `path`, then rename it onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if _full(exc):
            raise _disk_full(path, exc) from exc
        raise
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        tmp.chmod(FILE_MODE)
        os.replace(tmp, path)
    except Exception as exc:
        if _full(exc):
            tmp.unlink(missing_ok=True)
            raise _disk_full(path, exc) from exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    """`text` (UTF-8) into `path`, atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: Path, payload: Any) -> Path:
    """`payload` as indented, key-sorted JSON (str() for what JSON cannot hold), atomically."""
    return atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


class SwapError(UserError, OSError):
    """A finished folder could not be swapped in; it is kept, and the message says where."""


class DiskFullError(UserError, OSError):
    """No space left (or the quota reached) while writing a file or folder; the previous version is untouched."""


def _full(exc: BaseException) -> bool:
    """ENOSPC or EDQUOT, raised as OSError or as a library's own error (safetensors: "os error 28")."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "Disk quota exceeded" in text


def _disk_full(path: Path, exc: BaseException) -> DiskFullError:
    free = shutil.disk_usage(path.parent).free if path.parent.exists() else 0
    return DiskFullError(
        f"{path}: no space left on its disk while writing it ({free / 2**20:.1f} MiB free now); nothing of the new "
        f"version was kept and the previous one is unchanged; free space and run the command again"
    )


def _aside(out_dir: Path) -> Path:
    return out_dir.with_name(f".{out_dir.name}-old")


def _target(out_dir: Path) -> Path:
    """Where the swap happens: `out_dir`, or the folder a symlinked `out_dir` points to."""
    out_dir = Path(out_dir)
    return out_dir.resolve() if out_dir.is_symlink() else out_dir


def _remove(path: Path) -> None:
    """Remove a folder, file or link (a link alone, never what it points to); absent is fine."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def recover_dir(out_dir: Path) -> str | None:
    """Finish a swap a crash interrupted: `out_dir` gone but its previous version set aside ->
    put the previous version back. Returns what was done, or None when there was nothing to do."""
    out_dir = _target(out_dir)
    old = _aside(out_dir)
    if out_dir.exists() or not old.is_dir():
        return None
    old.rename(out_dir)
    return f"{out_dir}: restored the previous version (a crash interrupted its replacement)"


def atomic_dir(out_dir: Path, write: Callable[[Path], None]) -> Path:
    """Run `write(tmp)` into a fresh sibling folder, then swap it in for `out_dir` (or, when
    `out_dir` is a symlink, for the folder it points to)."""
    given, out_dir = Path(out_dir), _target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(out_dir)
    _remove_orphans(out_dir)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-tmp-{os.getpid()}-", dir=out_dir.parent))
    except OSError as exc:
        if _full(exc):
            raise _disk_full(given, exc) from exc
        raise
    try:
        write(tmp)
        tmp.chmod(DIR_MODE)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if _full(exc):
            raise _disk_full(given, exc) from exc
        raise
    try:
        _swap(tmp, out_dir)
    except OSError as exc:
        raise SwapError(f"{given}: could not be replaced ({exc}); the new version is kept in {tmp}") from exc
    if given != out_dir and _aside(given).is_symlink():
        _aside(given).unlink()  # the link a swap of the link itself once set aside (never a folder)
    return given


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _remove_orphans(out_dir: Path) -> None:
    """Remove temporary folders of `out_dir` whose writer is gone (its pid in the name; none: gone)."""
    for tmp in out_dir.parent.glob(f".{out_dir.name}-tmp-*"):
        pid = tmp.name.removeprefix(f".{out_dir.name}-tmp-").split("-", 1)[0]
        if tmp.is_dir() and not (pid.isdigit() and _alive(int(pid))):
            shutil.rmtree(tmp, ignore_errors=True)


def _swap(tmp: Path, out_dir: Path) -> None:
    """Rename `out_dir` aside, `tmp` in, then remove the aside; on failure put the old one back."""
    old = None
    if out_dir.exists() or out_dir.is_symlink():
        old = _aside(out_dir)
        _remove(old)
        out_dir.rename(old)
    try:
        tmp.rename(out_dir)
    except BaseException:
        if old is not None and not out_dir.exists():
            old.rename(out_dir)
        raise
    if old is not None:
        _remove(old)


__all__ = [
    "DIR_MODE",
    "DiskFullError",
    "FILE_MODE",
    "SwapError",
    "atomic_dir",
    "atomic_write",
    "atomic_write_json",
    "atomic_write_text",
    "recover_dir",
]
