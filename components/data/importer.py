"""Ready-made prompt groups from a user's own file: JSONL or CSV, one row per prompt.

The rows are folded into `PromptGroup`s and written exactly where `build_groups` writes
(``data/groups/{consistency,diversity}.jsonl``), so validation, training and evaluation cannot tell
an imported group from a built one. Format (docs/data.md, example: ``data/examples/groups.jsonl``):

==================  ========  =====================================================================
column              required  meaning
==================  ========  =====================================================================
group_id            yes       rows with the same id are the variants of one group
text                yes       the prompt of this variant
domain              yes       e.g. ``job``; the paper's gap is reported per domain
task                no        ``consistency`` (default) or ``diversity``
split               no        ``train`` or ``heldout``; left out in every row: split by group with
                              ``data.heldout_fraction`` and ``seed``, as built groups are
variant_id          no        unique in the group (default ``v<k>``, k its row in the group)
attributes          no        JSONL: an object ``{"gender": "woman"}``; CSV: one ``attr.<axis>``
                              column per axis (``attr.gender``), an empty cell for none
valid_answers       diversity JSONL: a list; CSV: a JSON list, or entries separated by ``;``
answer_normalizer   diversity the name of a registered answer normaliser
==================  ========  =====================================================================

A group's ``variant_axes`` are the attribute values seen in its domain, so validation reports a
group that misses one (a question asked only as a woman). ``data.answer_instruction`` is appended to
every consistency prompt alike, as for built groups. A bad row fails with one line naming the file,
the line, the field and the rule (`ImportRowError`); nothing is written unless every row is good.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from components.contracts.errors import UserError
from components.contracts.groups import undeclared_differences
from components.config import DataConfig
from components.data.builder import assign_splits
from components.data.io import SPLITS, TASKS, MissingGroupsFileError, iter_jsonl, write_groups
from components.data.schema import Member, PromptGroup

COLUMNS = ("group_id", "text", "domain", "task", "split", "variant_id", "attributes", "valid_answers", "answer_normalizer")
ATTRIBUTE_PREFIX = "attr."
GROUP_FIELDS = ("domain", "task", "split", "valid_answers", "answer_normalizer")  # one value per group


class ImportRowError(UserError, ValueError):
    """A row of an imported groups file breaks a rule: ``<file>: line <n>: <field>: <rule>``."""

    def __init__(self, path: Path, line: int, field: str, rule: str) -> None:
        self.path, self.line, self.field, self.rule = Path(path), line, field, rule
        super().__init__(f"{path}: line {line}: {field}: {rule}")


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, value, error in iter_jsonl(path):
        if error is not None:
            raise ImportRowError(path, line, "<row>", error)
        if not isinstance(value, dict):
            raise ImportRowError(path, line, "<row>", f"must be a JSON object, got {type(value).__name__}")
        yield line, value


def _csv_cell_list(path: Path, line: int, cell: str) -> list[str]:
    cell = cell.strip()
    if cell.startswith("["):
        try:
            value = json.loads(cell)
        except json.JSONDecodeError as exc:
            raise ImportRowError(path, line, "valid_answers", f"not a JSON list: {exc.msg}") from None
        return value
    return [part.strip() for part in cell.split(";") if part.strip()]


def _csv_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ImportRowError(path, line, "<row>", f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column})") from None


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with io.StringIO(_csv_text(path), newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        unknown = [c for c in header if c not in COLUMNS and not c.startswith(ATTRIBUTE_PREFIX)]
        if unknown:
            raise ImportRowError(path, 1, unknown[0], f"unknown column; known: {list(COLUMNS)} and attr.<axis>")
        for record in reader:
            line = reader.line_num
            if None in record:
                raise ImportRowError(path, line, "<row>", f"{len(header) + len(record[None])} cells for {len(header)} columns")
            row: dict[str, Any] = {}
            attributes = {}
            for column, cell in record.items():
                cell = (cell or "").strip() if column != "text" else (cell or "")
                if column.startswith(ATTRIBUTE_PREFIX):
                    if cell:
                        attributes[column[len(ATTRIBUTE_PREFIX) :]] = cell
                elif column == "valid_answers":
                    if cell:
                        row[column] = _csv_cell_list(path, line, cell)
                elif column == "attributes":
                    if cell:
                        raise ImportRowError(path, line, column, "CSV files give attributes as attr.<axis> columns")
                elif cell != "":
                    row[column] = cell
            if attributes:
                row["attributes"] = attributes
            yield line, row


def read_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line, row) of every row of a ``.jsonl`` or ``.csv`` file."""
    path = Path(path)
    if not path.is_file():
        raise MissingGroupsFileError(f"{path}: no such file to import")
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise ImportRowError(path, 0, "<file>", f"unsupported file type {suffix!r}; use .jsonl or .csv")
    return list(_jsonl_rows(path) if suffix == ".jsonl" else _csv_rows(path))


def _check_row(path: Path, line: int, row: dict[str, Any]) -> None:
    unknown = [k for k in row if k not in COLUMNS]
    if unknown:
        raise ImportRowError(path, line, unknown[0], f"unknown field; known: {list(COLUMNS)}")
    for name in ("group_id", "text", "domain"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ImportRowError(path, line, name, "required, a non-empty string")
    if row.get("task", "consistency") not in TASKS:
        raise ImportRowError(path, line, "task", f"must be one of {list(TASKS)}, got {row['task']!r}")
    if "split" in row and row["split"] not in SPLITS:
        raise ImportRowError(path, line, "split", f"must be one of {list(SPLITS)}, got {row['split']!r}")
    attributes = row.get("attributes", {})
    if not isinstance(attributes, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
        raise ImportRowError(path, line, "attributes", "must map axis names to string values")
    answers = row.get("valid_answers")
    if answers is not None and (not isinstance(answers, list) or not all(isinstance(a, str) for a in answers)):
        raise ImportRowError(path, line, "valid_answers", "must be a list of strings")


def rows_to_groups(path: Path, rows: list[tuple[int, dict[str, Any]]], data_cfg: DataConfig, seed: int) -> list[PromptGroup]:
    """Fold rows into groups (first-seen order), check each, and split them where no row says how."""
    path = Path(path)
    if not rows:
        raise ImportRowError(path, 0, "<file>", "no rows")
    with_split = [line for line, row in rows if "split" in row]
    if with_split and len(with_split) != len(rows):
        missing = next(line for line, row in rows if "split" not in row)
        raise ImportRowError(path, missing, "split", "set in some rows and not in others: set it in every row or in none")
    grouped: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for line, row in rows:
        _check_row(path, line, row)
        grouped.setdefault(row["group_id"], []).append((line, row))

    axes: dict[str, dict[str, list[str]]] = {}  # domain -> axis -> values in first-seen order
    for line, row in rows:
        if row.get("task", "consistency") == "consistency":
            for axis, value in row.get("attributes", {}).items():
                values = axes.setdefault(row["domain"], {}).setdefault(axis, [])
                if value not in values:
                    values.append(value)

    suffix = f" {data_cfg.answer_instruction.strip()}" if data_cfg.answer_instruction.strip() else ""
    groups = []
    for group_id, members in grouped.items():
        first_line, first = members[0]
        for line, row in members[1:]:
            for name in GROUP_FIELDS:
                if row.get(name) != first.get(name):
                    raise ImportRowError(
                        path, line, name, f"{row.get(name)!r} differs from line {first_line} of group {group_id!r} ({first.get(name)!r})"
                    )
        task = first.get("task", "consistency")
        if task == "consistency":
            _check_differs_only_on_axes(path, group_id, members, axes.get(first["domain"], {}))
        seen_ids: dict[str, int] = {}
        built_members = []
        for k, (line, row) in enumerate(members):
            variant_id = row.get("variant_id", f"v{k}")
            if variant_id in seen_ids:
                raise ImportRowError(path, line, "variant_id", f"{variant_id!r} repeats line {seen_ids[variant_id]} of group {group_id!r}")
            seen_ids[variant_id] = line
            text = row["text"] + (suffix if task == "consistency" else "")
            built_members.append(Member(variant_id=variant_id, attributes=row.get("attributes", {}), text=text))
        try:
            groups.append(
                PromptGroup(
                    group_id=group_id,
                    domain=first["domain"],
                    task=task,
                    split=first.get("split", "train"),
                    members=built_members,
                    variant_axes=axes.get(first["domain"], {}) if task == "consistency" else {},
                    valid_answers=first.get("valid_answers"),
                    answer_normalizer=first.get("answer_normalizer"),
                )
            )
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(p) for p in error["loc"]) or "<row>"
            raise ImportRowError(path, first_line, field, error["msg"]) from None
    return groups if with_split else assign_splits(groups, data_cfg, seed)


def _check_differs_only_on_axes(path: Path, group_id: str, members: list[tuple[int, dict[str, Any]]], axes: dict) -> None:
    """A group's variants differ only on its axes: each names the same attributes (the first row
    naming other ones than the group's first row is reported)."""
    differences = undeclared_differences(axes, [row for _, row in members])
    if differences:
        names = [set(row.get("attributes", {})) for _, row in members]
        line = next((line for (line, _), n in zip(members, names) if n != names[0]), members[0][0])
        raise ImportRowError(
            path, line, "attributes",
            f"the variants of group {group_id!r} differ beyond their axes ({'; '.join(differences)}): give every "
            "variant the same attribute names, so that the group compares one axis at a time",
        )  # fmt: skip


def import_groups(
    path: Path, out_dir: Path, data_cfg: DataConfig, seed: int, extra: list[PromptGroup] = ()
) -> tuple[list[PromptGroup], dict[str, Path]]:
    """Read `path`, fold it into groups and write them with `extra` (the decision groups,
    `data.decision_groups`) as the groups files; nothing is written on an error."""
    groups = rows_to_groups(Path(path), read_rows(Path(path)), data_cfg, seed) + list(extra)
    return groups, write_groups(groups, out_dir)
