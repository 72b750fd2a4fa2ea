"""The validation report: one result per (rule, file), with the offending rows, saved as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from components.contracts.atomic import atomic_write_text
from components.contracts.errors import UserError

MAX_ROWS_IN_MESSAGE = 10
MAX_VALUE_CHARS = 80  # longer values (prompt texts) are cut in messages, kept whole in the report


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


@dataclass(frozen=True)
class OffendingRow:
    """A row that breaks a rule: where it is (file, 1-based line) and the value at fault."""

    file: str
    line: int | None  # None for a file-level rule
    group_id: str | None
    value: Any
    field: str | None = None  # what `value` is, e.g. "text", "missing"
    variant_id: str | None = None
    member_index: int | None = None  # position in `members` (member-level rules)

    def describe(self) -> str:
        """``line 12 (group_id=investment-0011, missing: ['gender=man'])``."""
        where = f"line {self.line}" if self.line is not None else "file"
        parts = [f"group_id={self.group_id}"] if self.group_id is not None else []
        if self.variant_id is not None:
            parts.append(f"variant_id={self.variant_id}")
        elif self.member_index is not None:
            parts.append(f"member #{self.member_index}")
        value = _short(self.value)
        parts.append(f"{self.field}: {value}" if self.field else value)
        return f"{where} ({', '.join(parts)})"


@dataclass(frozen=True)
class RuleResult:
    """Outcome of one named rule on one file."""

    rule: str
    file: str
    success: bool
    description: str
    offending_rows: list[OffendingRow] = field(default_factory=list)
    error: str | None = None  # GX could not evaluate the rule (a bug, not a data problem)

    def describe(self) -> str:
        """``<file>: rule '<rule>' failed for N row(s): line 3 (...), ...``."""
        if self.error is not None:
            return f"{self.file}: rule '{self.rule}' could not be evaluated: {self.error}"
        shown = ", ".join(r.describe() for r in self.offending_rows[:MAX_ROWS_IN_MESSAGE])
        more = len(self.offending_rows) - MAX_ROWS_IN_MESSAGE
        tail = f", and {more} more" if more > 0 else ""
        return f"{self.file}: rule '{self.rule}' failed for {len(self.offending_rows)} row(s): {shown}{tail}"


@dataclass(frozen=True)
class ValidationReport:
    """All rule results of one validation of a groups folder."""

    success: bool
    groups_dir: str
    files: dict[str, dict[str, int]]  # file -> {"groups": n, "members": m}
    rules: list[RuleResult]
    settings: dict[str, Any] = field(default_factory=dict)
    data_docs: str | None = None  # GX's Data Docs page of this and earlier runs (index.html)
    groups_sha256: str | None = None  # of the files validated: train/evaluate refuse other files

    @property
    def failures(self) -> list[RuleResult]:
        return [r for r in self.rules if not r.success]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: Path) -> Path:
        """Save as JSON (atomically)."""
        text = json.dumps(self.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n"
        return atomic_write_text(Path(path), text)


class GroupValidationError(UserError, ValueError):
    """Groups files break at least one rule; `report` holds every result."""

    def __init__(self, report: ValidationReport) -> None:
        self.report = report
        super().__init__("\n".join(r.describe() for r in report.failures))
