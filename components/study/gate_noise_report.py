"""A gate-noise study's results (`report: gate_noise`): the default gates judged on A/A evaluations.

Every arm is the base model judged against itself under other seeds (`eval.candidate.source: base`,
`seed_offset` > 0), so a gate that refuses one refuses an unchanged model. Per gate of the
diversity section (`components.release.gate_noise`): the default threshold, how many A/A
evaluations it refused, the mean and largest worsening and the one-sided 95 % noise level
z_0.95 · RMS; table.csv has each arm's value per gate. Nothing here runs a model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from components.config import GateConfig
from components.contracts.atomic import atomic_write_text
from components.contracts.summary import SUMMARY_FILE
from components.formatting import number, signed
from components.release.gate_noise import gate_noise
from components.study.layout import StudyLayout, has_finished


def finished_summaries(arms_dir: Path, arms: list[str]) -> dict[str, dict]:
    """{arm: its metrics.json} for the finished arms (arm.json and metrics.json), in `arms` order."""
    found = {}
    for name in arms:
        folder = Path(arms_dir) / name
        if has_finished(folder):
            found[name] = json.loads((folder / SUMMARY_FILE).read_text())
    return found


def write_gate_noise_report(name: str, layout: StudyLayout, arms: list[str], command: str, gate: GateConfig | None = None) -> Path:
    """report.md and table.csv (one row per arm and gate) of the study's results folder; `gate`: the
    thresholds judged (default: the shipped defaults, `GateConfig()`)."""
    gate = gate or GateConfig()
    summaries = finished_summaries(layout.arms, arms)
    layout.folder.mkdir(parents=True, exist_ok=True)
    lines = [f"# {name}: the default gates on an unchanged model", "", f"`{command}` writes this page from `results/{layout.folder.name}/arms/`.", "",
             f"Each arm judges the base model against itself (other seeds): {len(summaries)} of {len(arms)} A/A evaluations finished. "
             "A gate whose 95 % noise level (z_0.95 · RMS of its A/A values) is above its threshold refuses an unchanged "
             "model more than 5 % of the time.", ""]  # fmt: skip
    if not summaries:
        pd.DataFrame(columns=["arm", "gate", "value", "threshold", "passed"]).to_csv(layout.table, index=False)
        return atomic_write_text(layout.report, "\n".join([*lines, "No arm has finished yet.", ""]))
    noise = gate_noise(summaries.values(), gate)
    rows = [{"arm": arm, "gate": g.gate, "value": value, "threshold": g.threshold, "passed": passed}
            for g in noise for arm, value, passed in zip(summaries, g.values, g.passed)]  # fmt: skip
    pd.DataFrame(rows).to_csv(layout.table, index=False)
    lines += ["| gate | threshold (default) | A/A evaluations | refused | mean | max | noise level (95 %) | threshold at its noise |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for g in noise:
        r = g.row()
        lines.append(f"| {g.gate} | {g.threshold_field} = {g.threshold:g} | {r['n']} | {g.refused} | {signed(r['mean'])} | "
                     f"{signed(r['max'])} | {number(g.level)} | {g.suggested:g} |")  # fmt: skip
    lines += ["", *(f"- {note}" for note in layout.notes()), ""]
    return atomic_write_text(layout.report, "\n".join(lines))
