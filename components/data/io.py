"""Reading and writing `PromptGroup` JSONL files (`data/groups/{consistency,diversity}.jsonl`).

One group per line, ``PromptGroup.model_dump(mode="json")``. Writes are atomic (temp file in the
same folder, then rename), so a reader never sees half a file. Blank lines are skipped on read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from components.contracts.atomic import atomic_write_text
from components.contracts.errors import UserError
from components.data.schema import PromptGroup, Split, TaskKind

TASKS: tuple[str, ...] = get_args(TaskKind)
SPLITS: tuple[str, ...] = get_args(Split)


class GroupFileError(UserError, ValueError):
    """A groups file has a line that is not valid JSON or not a valid `PromptGroup`.

    The message reads ``<file>: line <n>: <field>: <problem>``.
    """

    def __init__(self, path: Path, line: int, field: str, problem: str) -> None:
        self.path, self.line, self.field, self.problem = Path(path), line, field, problem
        super().__init__(f"{path}: line {line}: {field}: {problem}")


class MissingGroupsFileError(UserError, FileNotFoundError):
    """A groups file to read (built, or a user's own to import) is not there; the message names it."""


def groups_file(groups_dir: Path, task: str) -> Path:
    """Path of the file holding the groups of one task kind: ``<groups_dir>/<task>.jsonl``."""
    return Path(groups_dir) / f"{task}.jsonl"


def to_jsonl(groups: Iterable[PromptGroup]) -> str:
    """One compact JSON object per line (ending with a newline)."""
    return "".join(
        json.dumps(g.model_dump(mode="json"), ensure_ascii=False) + "\n" for g in groups
    )


def write_groups(groups: list[PromptGroup], out_dir: Path) -> dict[str, Path]:
    """Write ``consistency.jsonl`` and ``diversity.jsonl`` (each atomically); return {task: path}.

    Both files are always written (an empty file when a task has no groups), in input order.
    """
    return {
        task: atomic_write_text(
            groups_file(out_dir, task), to_jsonl(g for g in groups if g.task == task)
        )
        for task in TASKS
    }


def _field_name(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "<row>"


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(1-based line number, parsed value or None, error or None) for each non-blank line.

    Lines are decoded one by one, so bytes that are not UTF-8 are an error of their line (with the
    byte's column), not of the whole file.
    """
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield number, None, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                continue
            if not line.strip():
                continue
            try:
                yield number, json.loads(line), None
            except json.JSONDecodeError as exc:
                yield number, None, f"not valid JSON ({exc.msg} at column {exc.colno})"


def read_groups(path: Path) -> list[PromptGroup]:
    """Parse a JSONL groups file; a bad line raises `GroupFileError` naming file, line and field."""
    path = Path(path)
    groups: list[PromptGroup] = []
    for number, row, error in iter_jsonl(path):
        if error is not None:
            raise GroupFileError(path, number, "<row>", error)
        try:
            groups.append(PromptGroup.model_validate(row))
        except ValidationError as exc:
            err = exc.errors()[0]
            extra = exc.error_count() - 1
            more = f" (and {extra} more error(s))" if extra else ""
            raise GroupFileError(path, number, _field_name(err["loc"]), f"{err['msg']}{more}") from None
    return groups


def load_groups(
    groups_dir: Path, task: str | None = None, split: str | None = None
) -> list[PromptGroup]:
    """Groups of one task kind (or of every task file present), optionally of one split."""
    if task is not None and task not in TASKS:
        raise ValueError(f"unknown task {task!r} (known: {', '.join(TASKS)})")
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    tasks = [task] if task is not None else list(TASKS)
    paths = [groups_file(groups_dir, t) for t in tasks]
    present = [p for p in paths if p.is_file()]
    if task is not None and not present:
        raise MissingGroupsFileError(f"{paths[0]}: groups file not found (run the build step)")
    if not present:
        names = ", ".join(p.name for p in paths)
        raise MissingGroupsFileError(f"{groups_dir}: no groups files ({names})")
    groups = [g for p in present for g in read_groups(p)]
    return [
        g
        for g in groups
        if (task is None or g.task == task) and (split is None or g.split == split)
    ]
