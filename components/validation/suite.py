"""Validate groups files with Great Expectations (GX Core 1.x): `validate_groups`.

The JSONL files are flattened into three tables (`flatten.py`); each table gets one GX
ExpectationSuite built from the checks of `rules.py` (rule name in each expectation's ``meta``),
run by a Checkpoint (its ValidationDefinition on a pandas dataframe asset of an ephemeral context)
whose action updates GX's Data Docs beside the report (`<validation>/data_docs/index.html`: the
suites and every run's results, as GX users read them). GX's unexpected row indexes are mapped back
to file, line and group id, giving one `RuleResult` per (rule, file). GX is imported on first use
(~3-5 s) and its context is reused in the process.
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
DATA_DOCS_DIR = "data_docs"  # GX's Data Docs, beside report.json


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


_CHECKPOINTS: dict[tuple[str, str], dict[str, Any]] = {}  # (repr(checks), Data Docs folder) -> {table: Checkpoint}


def _docs_site(docs_dir: Path) -> str:
    """The name of a Data Docs site (static HTML, GX's own pages) written to `docs_dir`, added once."""
    context, _ = _gx_batch_definitions()
    name = f"{DATA_SOURCE}-{hashlib.sha256(str(docs_dir.resolve()).encode()).hexdigest()[:12]}"
    if name not in context.get_config().data_docs_sites:
        store = {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir.resolve())}
        context.add_data_docs_site(name, {"class_name": "SiteBuilder", "store_backend": store,
                                          "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})  # fmt: skip
    return name


def _checkpoints(all_checks: list[Check], docs_dir: Path) -> dict[str, Any]:
    """One GX Checkpoint per table (its suite, its validation definition, an action that updates the
    Data Docs in `docs_dir`), built once per distinct check list and folder."""
    key = (repr(all_checks), str(docs_dir.resolve()))
    if key in _CHECKPOINTS:
        return _CHECKPOINTS[key]
    import great_expectations as gx
    import great_expectations.expectations as gxe

    context, batches = _gx_batch_definitions()
    site = _docs_site(docs_dir)
    suffix = hashlib.sha256(repr(key).encode()).hexdigest()[:12]
    checkpoints = {}
    for table in TABLES:
        expectations = [
            getattr(gxe, check.expectation)(**check.kwargs, meta={"rule": check.rule, "check": number})
            for number, check in enumerate(all_checks)
            if check.table == table
        ]
        name = f"{DATA_SOURCE}-{table}-{suffix}"
        suite = context.suites.add(gx.ExpectationSuite(name=f"{DATA_SOURCE}-{table}-{suffix}", expectations=expectations))
        definition = context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batches[table], suite=suite))
        checkpoints[table] = context.checkpoints.add(
            gx.Checkpoint(name=name, validation_definitions=[definition], result_format="COMPLETE",
                          actions=[gx.checkpoint.UpdateDataDocsAction(name="data-docs", site_names=[site])])
        )  # fmt: skip
    _CHECKPOINTS[key] = checkpoints
    return checkpoints


def run_checks(tables: GroupTables, all_checks: list[Check], docs_dir: Path) -> list[tuple[Check, list[Any], str | None]]:
    """Run every check through GX, one Checkpoint per table (which also updates the Data Docs in
    `docs_dir`): (check, unexpected row index labels, error or None)."""
    checkpoints = _checkpoints(all_checks, docs_dir)
    outcomes = []
    for table in TABLES:
        result = checkpoints[table].run(batch_parameters={"dataframe": getattr(tables, table)})
        for validation in result.run_results.values():
            for r in validation.results:
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
            listed = rows[(check.rule, offending.file)]
            if offending not in listed:  # a row two checks of one rule flag (an empty group_id and domain) is named once
                listed.append(offending)
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


def rule_settings(data_cfg: DataConfig, families_path: Path | None = None) -> dict[str, Any]:
    """What the rules' verdicts depend on besides the files (a report for other settings is stale):
    the bounds, the rules, the normalisers and the instruction families file's SHA-256."""
    families = files_sha256([Path(families_path)], absent_ok=True) if families_path is not None else None
    return {
        **data_cfg.model_dump(include={"min_chars", "max_chars", "max_variants_per_group", "max_prompt_tokens"}),
        "rules": sorted(RULES), "normalizers": normalizer_names(), "instruction_families_sha256": families,
    }  # fmt: skip


def validate_groups(
    groups_dir: Path, data_cfg: DataConfig, report_path: Path, tokenizer: TokenizerInfo | None = None, families_path: Path | None = None
) -> ValidationReport:
    """Validate ``consistency.jsonl`` and ``diversity.jsonl`` of `groups_dir` against `RULES`.

    Always writes the report (JSON) to `report_path`, with the files' SHA-256 (what `train` and
    `evaluate` check before they read the files); raises `GroupValidationError` (naming file, rule
    and offending lines) if any rule fails; returns the report otherwise. Without `tokenizer` the
    token rules are not evaluated (the report says so: `settings.tokenizer_sha256` is null). Groups
    with an instruction are judged against the families file at `families_path`
    (`paths.instruction_families`).
    """
    import great_expectations as gx

    paths = [groups_file(Path(groups_dir), task) for task in TASKS]
    digest = groups_sha256(Path(groups_dir))
    tables = flatten_groups(paths, tokenizer, families_path)
    docs_dir = Path(report_path).parent / DATA_DOCS_DIR
    special = tuple(tokenizer.special_tokens) if tokenizer is not None else ()
    results = _rule_results(tables, run_checks(tables, checks(data_cfg, special), docs_dir))
    report = ValidationReport(
        success=all(r.success for r in results),
        groups_dir=str(groups_dir),
        files=_file_counts(tables),
        rules=results,
        settings={
            **rule_settings(data_cfg, families_path),
            "great_expectations": gx.__version__,
            "tokenizer_sha256": tokenizer.sha256 if tokenizer is not None else None,
        },
        groups_sha256=digest,
        data_docs=str(docs_dir / "index.html"),
    )
    report.write(report_path)
    if not report.success:
        raise GroupValidationError(report)
    return report
