"""How a gate decision is recorded (`gate` judges, this writes what it judged): the gate table
(`gates.csv`, `gates.md`, the rows report.html shows), the start of `decision.json`, the register
run's metrics and tags, and the tags a registered version carries (`contracts.version_tags`)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping
from pathlib import Path

from components.contracts.summary import EvaluationSummary
from components.contracts.version_tags import GATE_PREFIX, NO_CHAMPION, Champion, GateDetail, Provenance, VersionTags
from components.formatting import significant
from components.release.gate import GateDecision

GATES_CSV, GATES_MD = "gates.csv", "gates.md"
COLUMNS = ["gate", "value", "threshold", "verdict", "reason"]


def gate_rows(decision: GateDecision) -> list[dict]:
    """One row per gate: gate, value, threshold, verdict, reason (the gate table)."""
    return [
        {"gate": r.name, "value": r.value, "threshold": r.threshold, "verdict": "pass" if r.passed else "fail", "reason": r.reason}
        for r in decision.results
    ]


def gate_markdown(decision: GateDecision) -> str:
    """The gate table as markdown, with the overall verdict first."""
    lines = [f"**Gates: {'passed' if decision.passed else 'failed'}**", "", "| " + " | ".join(COLUMNS) + " |", "|---|---|---|---|---|"]
    for row in gate_rows(decision):
        value = significant(row["value"])
        reason = row["reason"].replace("|", "\\|")
        lines.append(f"| {row['gate']} | {value} | {row['threshold']:g} | {row['verdict']} | {reason} |")
    return "\n".join(lines) + "\n"


def gate_csv(decision: GateDecision) -> str:
    """The gate table as CSV (an empty cell for an undefined value)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(gate_rows(decision))
    return out.getvalue()


def write_gate_table(decision: GateDecision, folder: Path) -> list[Path]:
    """gates.csv and gates.md (one row per gate) in `folder`, each written atomically."""
    from components.contracts.atomic import atomic_write_text

    return [
        atomic_write_text(Path(folder) / GATES_CSV, gate_csv(decision)),
        atomic_write_text(Path(folder) / GATES_MD, gate_markdown(decision)),
    ]


def decision_outcome(decision: GateDecision, champion: Champion | None) -> dict:
    """The start of decision.json: the verdict, every gate's result and the champion judged against."""
    return {"passed": decision.passed, "gates": decision.to_dict()["results"], "champion": champion.version if champion else None}


def run_metrics(decision: GateDecision) -> dict[str, float]:
    """gate.<name>.value (when a number) and gate.<name>.threshold (when finite: a gate switched off
    has none), for the register run."""
    out = {}
    for r in decision.results:
        if isinstance(r.value, (int, float)):
            out[f"{GATE_PREFIX}{r.name}.value"] = r.value
        if math.isfinite(r.threshold):
            out[f"{GATE_PREFIX}{r.name}.threshold"] = r.threshold
    return out


def run_tags(decision: GateDecision) -> dict[str, str]:
    """gate.<name> = pass | fail, and gate.passed, for the register run (the version tags' encoder)."""
    return VersionTags(gate_passed=decision.passed, gates=decision.verdicts()).to_tags()


def registration_tags(decision: GateDecision, champion: Champion | None, summary: EvaluationSummary,
                      provenance: Provenance, params: Mapping[str, str] | None = None) -> VersionTags:  # fmt: skip
    """The tags a version is registered with: every gate's verdict, value, threshold and reason, the
    champion it was judged against, the metrics it was judged on, what it was built from and the
    training-relevant `params` (dotted path -> value, `binding.version_params`)."""
    return VersionTags(
        gate_passed=decision.passed,
        gates=decision.verdicts(),
        gate_details={r.name: GateDetail(r.value, r.threshold, r.reason) for r in decision.results},
        champion_at_registration=champion.version if champion else NO_CHAMPION,
        metrics=summary.numbers(),
        provenance=provenance,
        params=dict(params or {}),
    )


__all__ = ["GATES_CSV", "GATES_MD", "decision_outcome", "gate_csv", "gate_markdown", "gate_rows", "registration_tags",
           "run_metrics", "run_tags", "write_gate_table"]  # fmt: skip
