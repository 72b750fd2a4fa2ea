"""Groups JSONL files -> three flat tables for Great Expectations, *without* pydantic.

Reading raw JSON (not `PromptGroup`) lets a missing or mistyped field reach the checks as data, so
it is reported as a rule failure with its line, instead of stopping at the first parse error.

Tables (one pandas DataFrame each, default RangeIndex):

- ``files``: one row per expected file — ``file``, ``n_groups`` (0 when the file is missing),
  ``status`` ("3 group(s)" / "file not found").
- ``groups``: one row per non-blank line — ``file``, ``line``; ``row_error`` (not JSON / not an
  object); the raw ``group_id``/``domain``/``task``/``split`` when they are strings; a list
  ``type_problems`` (``["group_id: missing"]``: the fields whose type pydantic refuses against
  `PromptGroup` itself) and computed columns.
- ``members``: one row per element of ``members`` — ``file``, ``line``, ``member_index``,
  ``group_id``, ``variant_id``, ``type_problems`` (against `Member`), ``text_chars`` and
  computed columns.

GX's native expectations read the raw string columns (lengths of ``text_stripped``, patterns in
``strings`` (every string of a row, one per line), ``group_id``, ``domain``, ``variant_id`` and
``text``, uniqueness, value sets, ``known_task`` = ``file_task``). Computed columns stand where GX
has none: counts inside a JSON value (``n_members``, ``consistency_*``, ``diversity_*``), schema
problems (``type_problems``, ``unknown_fields``) and checks across rows (``n_splits_for_*``). They are
null where a check does not apply (e.g. ``consistency_*`` on diversity rows), so GX skips them. List
columns such as ``control_chars``, ``empty_ids`` and ``special_tokens`` only say what an offending row
holds, in the error message.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd
from pydantic import BaseModel, ValidationError

from components.contracts.groups import undeclared_differences
from components.contracts.naming import UnknownNameError
from components.data.io import TASKS, iter_jsonl
from components.data.normalizers import DEFAULT_NORMALIZER, aliases, get_normalizer
from components.data.schema import Member, PromptGroup

if TYPE_CHECKING:
    from components.instructions.families import InstructionFamilies

GROUP_FIELDS = tuple(PromptGroup.model_fields)
MEMBER_FIELDS = tuple(Member.model_fields)
ALLOWED_CONTROL = "\n\t"  # line breaks and tabs are text; every other Unicode Cc character is not


class PromptTokenizer(Protocol):
    """What the token rules need of the base model's tokenizer (`TokenizerInfo`)."""

    special_tokens: tuple[str, ...]

    def count(self, text: str) -> int: ...


MISSING = "missing"


@dataclass(frozen=True)
class GroupTables:
    files: pd.DataFrame
    groups: pd.DataFrame
    members: pd.DataFrame


def type_label(value: Any, depth: int = 2) -> str:
    """Short JSON type label: ``str``, ``int``, ``null``, ``list[str]``, ``dict[str, list[str]]``.

    Element types of a list (or value types of a dict) are listed with ``|``; empty containers
    read ``list[]`` / ``dict[]``.
    """
    if value is None:
        return "null"
    if isinstance(value, list):
        if depth == 0:
            return "list"
        inner = sorted({type_label(v, depth - 1) for v in value})
        return f"list[{'|'.join(inner)}]"
    if isinstance(value, dict):
        if depth == 0:
            return "dict"
        inner = sorted({type_label(v, depth - 1) for v in value.values()})
        return f"dict[str, {'|'.join(inner)}]" if inner else "dict[]"
    return type(value).__name__


def _is_type_error(error: dict) -> bool:
    """A pydantic error about a field's JSON type or presence; value rules (lengths, value sets, checks
    across fields) and unknown fields are rules of the suite's own, with their own messages. A value set
    (task, split) given something other than a string is a type error too."""
    if error["type"] in ("literal_error", "enum"):
        return not isinstance(error.get("input"), str)
    return error["type"] in ("missing", "none_required") or error["type"].endswith("_type")


def _type_problems(row: dict[str, Any], model: type[BaseModel]) -> list[str]:
    """``["text: missing", "group_id: int"]``: each field of `row` whose JSON type the schema `model`
    refuses. pydantic decides against the schema itself (nothing restates it here); the label says
    what the row holds. A member's own fields are its row's (`Member`), not its group's."""
    try:
        model.model_validate(row)
        return []
    except ValidationError as exc:
        errors = [e for e in exc.errors() if _is_type_error(e) and not (e["loc"][0] == "members" and len(e["loc"]) > 2)]
    problems: list[str] = []
    for error in errors:
        name = str(error["loc"][0])
        depth = 1 if name == "members" else 2  # a member that is not an object: the group's list of members
        problem = f"{name}: {MISSING if error['type'] == 'missing' else type_label(row.get(name), depth)}"
        if problem not in problems:
            problems.append(problem)
    return problems


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def control_characters(*texts: Any) -> list[str]:
    """``['U+0000']``: control characters (Unicode Cc, but newline and tab) in the strings given."""
    found = {c for t in texts if isinstance(t, str) for c in t if unicodedata.category(c) == "Cc" and c not in ALLOWED_CONTROL}
    return [f"U+{ord(c):04X}" for c in sorted(found)]


def strings(*values: Any) -> str:
    """The string values among `values`, one per line: the column the control-character pattern reads."""
    return "\n".join(v for v in values if isinstance(v, str))


def empty_ids(row: dict[str, Any], fields: tuple[str, ...]) -> list[str]:
    """Names of the id fields that are strings but empty or blank."""
    return [name for name in fields if isinstance(row.get(name), str) and not row[name].strip()]


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def duplicate_answers(answers: list[Any], normalizer: Any = DEFAULT_NORMALIZER) -> list[str]:
    """Valid answers listed more than once: each would count twice in the frequency-aware (GAPO)
    reward's uniform target, and the task's normaliser never returns the second.

    Two kinds: the same spelling (aliases split on ``|``, case and spaces folded), listed as the
    folded spelling (``'red'``); and a spelling that the task's registered answer `normalizer`
    reads as another entry (``integer``: "07" is 7), listed as ``'07 = 7 (integer)'``. An unknown
    normaliser name is its own rule's failure: only the first kind is checked then.
    """
    keys = Counter(_fold(alias) for a in answers if isinstance(a, str) for alias in a.split("|"))
    found = sorted(k for k, n in keys.items() if n > 1 and k)
    name = normalizer if isinstance(normalizer, str) else DEFAULT_NORMALIZER
    try:
        read = get_normalizer(name)
    except UnknownNameError:
        return found
    entries = [a for a in answers if isinstance(a, str) and a.strip()]
    for entry in entries:
        for spelling in aliases(entry):
            other = read(spelling, entries)
            if other is not None and other != entry and _fold(spelling) not in found:
                found.append(f"{spelling} = {other} ({name})")
    return found


def _read_rows(path: Path) -> list[tuple[int, Any, str | None]]:
    """(line number, parsed JSON object or None, error) for each non-blank line."""
    rows = []
    for number, value, error in iter_jsonl(path):
        if error is None and not isinstance(value, dict):
            value, error = None, f"expected a JSON object, got {type_label(value)}"
        rows.append((number, value, error))
    return rows


def _missing_axis_values(row: dict[str, Any]) -> list[str] | None:
    """``['gender=man']`` for each declared axis value no member has; None if not computable."""
    axes, members = row.get("variant_axes", {}), row.get("members")
    if not isinstance(axes, dict) or not isinstance(members, list):
        return None
    seen = defaultdict(set)
    for m in members:
        attributes = m.get("attributes") if isinstance(m, dict) else None
        if isinstance(attributes, dict):
            for axis, value in attributes.items():
                if isinstance(value, str):
                    seen[axis].add(value)
    return [
        f"{axis}={value}"
        for axis, values in axes.items()
        for value in (values if isinstance(values, list) else [])
        if value not in seen[axis]
    ]


def _group_record(file: str, line: int, row: dict[str, Any] | None, error: str | None, families: FamiliesSource | None = None) -> dict:
    record: dict[str, Any] = {"file": file, "line": line, "row_error": error}
    row = row or {}
    parsed = error is None
    record["type_problems"] = _type_problems(row, PromptGroup) if parsed else []
    record["n_type_problems"] = len(record["type_problems"]) if parsed else None
    for name in ("group_id", "domain", "task", "split"):
        record[name] = _str_or_none(row.get(name))
    record["empty_ids"] = empty_ids(row, ("group_id", "domain"))
    listed = row.get("valid_answers") if isinstance(row.get("valid_answers"), list) else []
    checked = (row.get("group_id"), row.get("domain"), row.get("answer_normalizer"), *listed)
    record["strings"] = strings(*checked) if parsed else None
    record["control_chars"] = control_characters(*checked)
    unknown = sorted(set(row) - set(GROUP_FIELDS))
    record["unknown_fields"] = unknown
    record["n_unknown_fields"] = len(unknown) if parsed else None
    members = row.get("members")
    record["n_members"] = len(members) if isinstance(members, list) else None
    record["known_task"] = record["task"] if record["task"] in TASKS else None
    record["file_task"] = Path(file).stem  # the task its file holds (consistency.jsonl, diversity.jsonl)
    is_consistency = record["task"] == "consistency"
    is_diversity = record["task"] == "diversity"
    record["consistency_n_members"] = len(members) if is_consistency and isinstance(members, list) else None
    axes = row.get("variant_axes", {})
    record["consistency_n_axes"] = len(axes) if is_consistency and isinstance(axes, dict) else None
    missing = _missing_axis_values(row) if is_consistency else None
    record["consistency_missing_axis_values"] = missing
    record["consistency_n_missing_axis_values"] = len(missing) if missing is not None else None
    extra = undeclared_differences(axes, members) if is_consistency else None
    record["consistency_undeclared_differences"] = extra
    record["consistency_n_undeclared_differences"] = len(extra) if extra is not None else None
    answers = row.get("valid_answers")
    answers = answers if isinstance(answers, list) else []
    record["diversity_n_valid_answers"] = sum(isinstance(a, str) and bool(a.strip()) for a in answers) if is_diversity else None
    normalizer = row.get("answer_normalizer")
    record["diversity_duplicate_answers"] = duplicate_answers(answers, normalizer) if is_diversity else None
    record["diversity_n_duplicate_answers"] = len(record["diversity_duplicate_answers"]) if is_diversity else None
    record["diversity_normalizer"] = (normalizer if isinstance(normalizer, str) else MISSING) if is_diversity else None
    record["decision_leak"] = decision_leak(row.get("decision"), record["split"]) if row.get("decision") is not None else None
    instruction = row.get("instruction")
    record["instruction_leak"] = instruction_leak(instruction, record["split"], families) if instruction is not None else None
    return record


class FamiliesSource:
    """The instruction families file a groups file is judged against, read on first use (only a file
    with an instructed group needs it; reading it imports lm-eval's checkers)."""

    def __init__(self, path: Path | None):
        self.path = path
        self._families: InstructionFamilies | None = None
        self._error: str | None = None

    def get(self) -> InstructionFamilies | None:
        """`InstructionFamilies`, or None with `error` saying why there are none."""
        if self._families is None and self._error is None:
            from components.instructions.families import FamiliesFileError, load_families

            if self.path is None or not Path(self.path).is_file():
                self._error = f"no families file ({self.path or 'paths.instruction_families'} not found)"
            else:
                try:
                    self._families = load_families(Path(self.path))
                except FamiliesFileError as exc:
                    self._error = str(exc)
        return self._families

    @property
    def error(self) -> str | None:
        return self._error


def instruction_leak(instruction: Any, split: str | None, families: FamiliesSource | None) -> str | None:
    """Why a group's instruction cannot be used (its family is not in the families file, or it is a
    held-out family in a train group: the held-out families judge the model and never reach
    training), or None."""
    if not isinstance(instruction, dict) or not isinstance(instruction.get("family"), str):
        return None  # a malformed field is reported by required_fields_typed
    family = instruction["family"]
    loaded = families.get() if families is not None else None
    if loaded is None:
        return f"{family!r}: " + (families.error if families is not None else "no instruction families file given")
    if family not in loaded.ids():
        return f"{family!r} is not a family of {loaded.source} (train: {', '.join(loaded.ids('train'))}; heldout: {', '.join(loaded.ids('heldout'))})"
    if split == "train" and loaded.split_of(family) == "heldout":
        return f"{family!r} is a held-out family (of {loaded.source}): a train group never carries one"
    return None


def decision_leak(decision: Any, split: str | None) -> str | None:
    """Why a decision group must not be in the groups (its question is held out by its benchmark, or
    the group itself is held out: decision groups are training data only), or None."""
    from components.fairness_benchmarks import BENCHMARKS

    if not isinstance(decision, dict) or not isinstance(decision.get("benchmark"), str):
        return None  # a malformed field is reported by required_fields_typed
    name, question = decision["benchmark"], decision.get("question_id")
    if name not in BENCHMARKS:
        return f"benchmark {name!r} is not registered ({', '.join(BENCHMARKS.names())})"
    if isinstance(question, int) and BENCHMARKS.get(name).split(question) == "heldout":
        return f"{name} question {question} is one of the benchmark's held-out questions"
    if split != "train":
        return f"split {split!r}: decision groups are training data (the benchmark's held-out questions judge the model)"
    return None


def _member_records(group: dict[str, Any], row: dict[str, Any] | None, tokenizer: PromptTokenizer | None = None) -> list[dict]:
    members = (row or {}).get("members")
    if not isinstance(members, list):
        return []
    records = []
    for index, member in enumerate(members):
        is_dict = isinstance(member, dict)
        m = member if is_dict else {}
        record: dict[str, Any] = {
            "file": group["file"],
            "line": group["line"],
            "member_index": index,
            "group_id": group["group_id"],
            "split": group["split"],
        }
        problems = _type_problems(m, Member) if is_dict else [f"member: {type_label(member)}"]
        record["type_problems"] = problems
        record["n_type_problems"] = len(problems)
        unknown = sorted(set(m) - set(MEMBER_FIELDS))
        record["unknown_fields"] = unknown
        record["n_unknown_fields"] = len(unknown) if is_dict else None
        record["variant_id"] = _str_or_none(m.get("variant_id"))
        record["empty_ids"] = empty_ids(m, ("variant_id",))
        text = _str_or_none(m.get("text"))
        attributes = m.get("attributes") if isinstance(m.get("attributes"), dict) else {}
        checked = (text, m.get("variant_id"), *attributes.keys(), *attributes.values())
        record["strings"] = strings(*checked) if is_dict else None
        record["control_chars"] = control_characters(*checked)
        record["text"] = text
        record["text_stripped"] = text.strip() if text is not None else None
        record["text_chars"] = len(text.strip()) if text is not None else None
        # null without a tokenizer: GX skips the token rules (train/evaluate validate again with one)
        record["prompt_tokens"] = tokenizer.count(text) if tokenizer is not None and text is not None else None
        special = [t for t in tokenizer.special_tokens if t in text] if tokenizer is not None and text is not None else None
        record["special_tokens"] = special
        records.append(record)
    return records


def _splits_per(frame: pd.DataFrame, key: str) -> pd.Series:
    """Number of distinct splits among the rows sharing each row's `key` (null key: null)."""
    known = frame.dropna(subset=[key, "split"])
    counts = known.groupby(key)["split"].nunique()
    return frame[key].map(counts).astype("Int64")


def _frame(records: list[dict], int_columns: tuple[str, ...], columns: list[str]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=columns).astype(object)
    frame = frame.where(frame.notna(), None)
    for column in int_columns:
        frame[column] = frame[column].astype("Int64")
    return frame


_GROUP_INTS = (
    "line",
    "n_members",
    "diversity_n_duplicate_answers",
    "n_type_problems",
    "n_unknown_fields",
    "consistency_n_members",
    "consistency_n_axes",
    "consistency_n_missing_axis_values",
    "consistency_n_undeclared_differences",
    "diversity_n_valid_answers",
)
_MEMBER_INTS = (
    "line", "member_index", "n_type_problems", "text_chars", "n_unknown_fields", "prompt_tokens",
)  # fmt: skip


def flatten_groups(paths: list[Path], tokenizer: PromptTokenizer | None = None, families_path: Path | None = None) -> GroupTables:
    """Read the groups files (a missing one counts 0 groups) into the three tables; with a
    `tokenizer`, members also get their prompt's token count and the special tokens in it; a group's
    instruction is judged against the families file at `families_path`."""
    families = FamiliesSource(families_path)
    file_records, group_records, member_records = [], [], []
    for path in paths:
        rows = _read_rows(path) if path.is_file() else []
        status = f"{len(rows)} group(s)" if path.is_file() else "file not found"
        file_records.append({"file": str(path), "n_groups": len(rows), "status": status})
        for line, row, error in rows:
            group = _group_record(str(path), line, row, error, families)
            group_records.append(group)
            member_records.extend(_member_records(group, row, tokenizer))
    dummy = _group_record("", 0, {}, None)  # its keys name the columns, even of an empty table
    member_columns = list(_member_records(dummy, {"members": [{}]})[0])
    groups = _frame(group_records, _GROUP_INTS, list(dummy))
    members = _frame(member_records, _MEMBER_INTS, member_columns)
    groups["n_splits_for_group_id"] = _splits_per(groups, "group_id")
    groups["splits_for_group_id"] = groups["group_id"].map(
        groups.dropna(subset=["group_id", "split"]).groupby("group_id")["split"].agg(lambda s: sorted(set(s)))
    )
    members["n_splits_for_text"] = _splits_per(members, "text")
    files = _frame(file_records, ("n_groups",), ["file", "n_groups", "status"])
    return GroupTables(files=files, groups=groups, members=members)
