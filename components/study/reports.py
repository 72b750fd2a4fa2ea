"""A study's report: one writer per report kind (`REPORT_KINDS`, one signature: the study and extra
notes, returning the page written), the files it consists of, and the README lines read from them.

Kinds: `consistency` (the paper's gap per arm, the learning curve; here), `instruction_calibration`
(the consistency report with the calibration's rule), `diversity`, `fairness`, `gate_noise`,
`confirmation` and `instruction_confirmation` (their own modules). `StudyConfig.report` names one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from components.contracts.atomic import atomic_write_json, atomic_write_text
from components.contracts.naming import NameRegistry
from components.study.arm_code import check_pooled_code, code_lines, pooled_arm_codes
from components.study.confirmation_report import write_confirmation_report
from components.study.diversity_report import write_diversity_report
from components.study.domain import COMMAND, CONSISTENCY, Study
from components.study.fairness_report import write_fairness_report
from components.study.gate_noise_report import write_gate_noise_report
from components.study.instruction_calibration_report import add_rule
from components.study.instruction_confirmation_report import write_instruction_confirmation_report
from components.study.report import CURVE_COLUMNS, CURVE_FILE, headline_metrics, plot_learning_curve, render_markdown, study_table

HEADLINES = "metrics.json"  # the consistency study's headline per arm and scope (DVC metrics)
CURVE_PLOT = "learning_curve.png"

ReportWriter = Callable[[Study, "list[str] | None"], Path]
REPORT_KINDS = NameRegistry[ReportWriter]("study report kind")


def _command(study: Study) -> str:
    return f"{COMMAND} --study {study.name}"


def _arms(study: Study) -> dict:
    return {name: arm.model_dump() for name, arm in study.config.arms.items()}


@REPORT_KINDS.register("consistency")
def write_consistency_report(study: Study, notes: list[str] | None = None) -> Path:
    """report.md, table.csv, metrics.json (the arms' headlines, DVC metrics) and the learning curve
    (learning_curve.csv / .png) of results/consistency/ from the finished arms."""
    layout = study.layout
    arms = _arms(study)
    table = study_table(layout.arms, order=list(arms))
    curves = [pd.read_csv(p) for p in sorted(layout.arms.glob(f"*/{CURVE_FILE}"))]
    curve = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(columns=CURVE_COLUMNS)
    layout.folder.mkdir(parents=True, exist_ok=True)
    table.to_csv(layout.table, index=False)
    atomic_write_json(layout.folder / HEADLINES, headline_metrics(table))
    if not curve.empty:
        curve.to_csv(layout.folder / CURVE_FILE, index=False)
        plot_learning_curve(curve, layout.folder / CURVE_PLOT)
    command = COMMAND if study.name == CONSISTENCY else _command(study)
    page = render_markdown(table, curve, arms, command, [*(notes or []), *layout.notes()], study.name)
    return atomic_write_text(layout.report, page)


@REPORT_KINDS.register("instruction_calibration")
def _instruction_calibration(study: Study, notes: list[str] | None = None) -> Path:
    """The consistency report with the instruction calibration's rule per arm (`instruction_calibration_report`)."""
    return add_rule(write_consistency_report(study, notes), study.layout, list(study.config.arms))


@REPORT_KINDS.register("fairness")
def _fairness(study: Study, notes: list[str] | None = None) -> Path:
    return write_fairness_report(study.name, study.layout, _arms(study), _command(study))


@REPORT_KINDS.register("diversity")
def _diversity(study: Study, notes: list[str] | None = None) -> Path:
    return write_diversity_report(study.name, study.layout, _arms(study), study.config.compare, _command(study))


@REPORT_KINDS.register("confirmation")
def _confirmation(study: Study, notes: list[str] | None = None) -> Path:
    return write_confirmation_report(study.layout, {name: arm.family or name for name, arm in study.config.arms.items()})


@REPORT_KINDS.register("instruction_confirmation")
def _instruction_confirmation(study: Study, notes: list[str] | None = None) -> Path:
    return write_instruction_confirmation_report(study.pooled_layouts)


@REPORT_KINDS.register("gate_noise")
def _gate_noise(study: Study, notes: list[str] | None = None) -> Path:
    return write_gate_noise_report(study.name, study.layout, list(study.config.arms), _command(study))


def study_report(study: Study, notes: list[str] | None = None) -> Path:
    """The study's report from its finished arms, by its `report` kind (`REPORT_KINDS`): only when the
    arms (with those of the studies it pools) ran one code, or code that differs only where the study
    allows (`arm_code`); each arm's code is appended to the page."""
    codes = pooled_arm_codes(study.pooled_layouts)
    check_pooled_code(f"studies/{study.name}.yaml", codes, study.config.code_differences)
    path = REPORT_KINDS.get(study.config.report, where="report")(study, notes)
    if lines := code_lines(codes):
        atomic_write_text(path, path.read_text().rstrip("\n") + "\n" + "\n".join(lines))
    return path


def write_study_report(study: Study, notes: list[str] | None = None) -> Path:
    """The study's report from its finished arms (`study_report`), then the results lines of the README
    and docs/results.md, which are read from results/ (`components.study.headlines`)."""
    from components.study.headlines import write_generated

    path = study_report(study, notes)
    write_generated(study.layout.folder.parent.parent)
    return path


def report_files(study: Study) -> list[Path]:
    """What the study's report consists of (those written so far): the page, its table, the plot(s)."""
    layout = study.layout
    names = [layout.report, layout.table, layout.plot]
    if study.config.report in ("consistency", "instruction_calibration"):
        names += [layout.folder / HEADLINES, layout.folder / CURVE_FILE, layout.folder / CURVE_PLOT]
    return [p for p in names if p.is_file()]


__all__ = ["CURVE_PLOT", "HEADLINES", "REPORT_KINDS", "report_files", "study_report", "write_consistency_report", "write_study_report"]
