"""Validate groups files with Great Expectations (GX Core 1.x): `validate_groups`.

The JSONL files are flattened into three tables (`flatten.py`); each table gets one GX
ExpectationSuite built from the checks of `rules.py` (rule name in each expectation's ``meta``),
run through a ValidationDefinition on an ephemeral context with a pandas dataframe asset. GX's
unexpected row indexes are mapped back to file, line and group id, giving one `RuleResult` per
(rule, file). GX is imported on first use (~3-5 s) and its context is reused in the process.
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd

from components.config import DataConfig
from components.data.io import TASKS, groups_file
from components.data.normalizers import normalizer_names
from components.hashing import files_sha256
from components.validation.flatten import GroupTables, flatten_groups
from components.validation.report import (
    GroupValidationError,
    OffendingRow,
    RuleResult,
    ValidationReport,
)
from components.validation.rules import RULES, Check, Table, checks
from components.validation.tokens import TokenizerInfo

DATA_SOURCE = "groupwise"
TABLES: tuple[Table, ...] = ("files", "groups", "members")


@functools.cache
def _gx_batch_definitions() -> tuple[Any, dict[str, Any]]:
    """Ephemeral GX context (progress bars off) with one whole-dataframe batch per table."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas(DATA_SOURCE)
    batches = {table: source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("all") for table in TABLES}
    return context, batches


def _raised(exception_info: Any) -> str | None:
    """The first exception message GX recorded for an expectation, if any."""
    if not isinstance(exception_info, dict):
        return None
    if exception_info.get("raised_exception"):
        return str(exception_info.get("exception_message"))
    for value in exception_info.values():
        if isinstance(value, dict) and value.get("raised_exception"):
            return str(value.get("exception_message"))
    return None


_DEFINITIONS: dict[str, dict[str, Any]] = {}  # repr(checks) -> {table: ValidationDefinition}


def _validation_definitions(all_checks: list[Check]) -> dict[str, Any]:
    """One ValidationDefinition per table for these checks (built once per distinct check list)."""
    key = repr(all_checks)
    if key in _DEFINITIONS:
        return _DEFINITIONS[key]
    import great_expectations as gx
    import great_expectations.expectations as gxe

    context, batches = _gx_batch_definitions()
    suffix = hashlib.sha256(key.encode()).hexdigest()[:12]
    definitions = {}
    for table in TABLES:
        expectations = [
            getattr(gxe, check.expectation)(**check.kwargs, meta={"rule": check.rule, "check": number})
            for number, check in enumerate(all_checks)
            if check.table == table
        ]
        name = f"{DATA_SOURCE}-{table}-{suffix}"
        suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
        definitions[table] = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batches[table], suite=suite))
    _DEFINITIONS[key] = definitions
    return definitions


def run_checks(tables: GroupTables, all_checks: list[Check]) -> list[tuple[Check, list[Any], str | None]]:
    """Run every check through GX: (check, unexpected row index labels, error or None)."""
    definitions = _validation_definitions(all_checks)
    outcomes = []
    for table in TABLES:
        result = definitions[table].run(batch_parameters={"dataframe": getattr(tables, table)}, result_format="COMPLETE")
        for r in result.results:
            check = all_checks[int(r.expectation_config.meta["check"])]
            error = _raised(r.exception_info)
            unexpected = [] if r.success else list(r.result.get("unexpected_index_list") or [])
            if not r.success and not unexpected and error is None:
                error = "failed without reporting rows"
            outcomes.append((check, unexpected, error))
    return outcomes


def _plain(value: Any) -> Any:
    """JSON-friendly scalar: pandas NA -> None, numpy numbers -> Python numbers."""
    if isinstance(value, list):
        return value
    if value is None or pd.isna(value):
        return None
    return value.item() if hasattr(value, "item") else value


def _offending_row(frame: pd.DataFrame, index: Any, check: Check) -> OffendingRow:
    row = frame.loc[index]
    get = lambda column: _plain(row[column]) if column in row.index else None  # noqa: E731
    return OffendingRow(
        file=str(row["file"]),
        line=get("line"),
        group_id=get("group_id"),
        variant_id=get("variant_id"),
        member_index=get("member_index"),
        field=check.label,
        value=get(check.shows),
    )


def _rule_results(tables: GroupTables, outcomes: list[tuple[Check, list[Any], str | None]]) -> list[RuleResult]:
    rows: dict[tuple[str, str], list[OffendingRow]] = defaultdict(list)
    errors: dict[str, str] = {}
    for check, unexpected, error in outcomes:
        frame = getattr(tables, check.table)
        for index in unexpected:
            offending = _offending_row(frame, index, check)
            rows[(check.rule, offending.file)].append(offending)
        if error is not None:
            errors[check.rule] = error
    order = lambda r: (r.line or 0, r.member_index or 0)  # noqa: E731
    return [
        RuleResult(
            rule=rule,
            file=file,
            success=not rows[(rule, file)] and rule not in errors,
            description=description,
            offending_rows=sorted(rows[(rule, file)], key=order),
            error=errors.get(rule),
        )
        for rule, description in RULES.items()
        for file in tables.files["file"]
    ]


def _file_counts(tables: GroupTables) -> dict[str, dict[str, int]]:
    members = tables.members.groupby("file").size()
    return {str(row.file): {"groups": int(row.n_groups), "members": int(members.get(row.file, 0))} for row in tables.files.itertuples()}


def groups_sha256(groups_dir: Path) -> str:
    """One digest over the groups files (name, size and bytes; a missing file counts as absent)."""
    return files_sha256([groups_file(Path(groups_dir), task) for task in TASKS], absent_ok=True)


def rule_settings(data_cfg: DataConfig) -> dict[str, Any]:
    """What the rules' verdicts depend on besides the files (a report for other settings is stale)."""
    return {
        **data_cfg.model_dump(include={"min_chars", "max_chars", "max_variants_per_group", "max_prompt_tokens"}),
        "rules": sorted(RULES), "normalizers": normalizer_names(),
    }  # fmt: skip


def validate_groups(groups_dir: Path, data_cfg: DataConfig, report_path: Path, tokenizer: TokenizerInfo | None = None) -> ValidationReport:
    """Validate ``consistency.jsonl`` and ``diversity.jsonl`` of `groups_dir` against `RULES`.

    Always writes the report (JSON) to `report_path`, with the files' SHA-256 (what `train` and
    `evaluate` check before they read the files); raises `GroupValidationError` (naming file, rule
    and offending lines) if any rule fails; returns the report otherwise. Without `tokenizer` the
    token rules are not evaluated (the report says so: `settings.tokenizer_sha256` is null).
    """
    import great_expectations as gx

    paths = [groups_file(Path(groups_dir), task) for task in TASKS]
    digest = groups_sha256(Path(groups_dir))
    tables = flatten_groups(paths, tokenizer)
    results = _rule_results(tables, run_checks(tables, checks(data_cfg)))
    report = ValidationReport(
        success=all(r.success for r in results),
        groups_dir=str(groups_dir),
        files=_file_counts(tables),
        rules=results,
        settings={
            **rule_settings(data_cfg),
            "great_expectations": gx.__version__,
            "tokenizer_sha256": tokenizer.sha256 if tokenizer is not None else None,
        },
        groups_sha256=digest,
    )
    report.write(report_path)
    if not report.success:
        raise GroupValidationError(report)
    return report
