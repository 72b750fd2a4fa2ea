"""Evaluation report files: metrics.json (DVC metrics), per-group tables, gap plot and summary.

Every file is written to a temporary sibling and moved into place with `os.replace`, so a reader
never sees a half-written file; `metrics.json` is written last, so its presence means the report
is complete. JSON is written with `allow_nan=False`: a NaN that slipped through fails loudly here
instead of reaching DVC or the gate.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from components.evaluation.records import CONSISTENCY_COLUMNS, DIVERSITY_COLUMNS, MODELS


@dataclass(frozen=True)
class ReportFiles:
    """Paths of the files `write_report` wrote."""

    metrics: Path
    per_group_consistency: Path
    per_group_diversity: Path
    entropy_gap_csv: Path
    entropy_gap_png: Path
    summary: Path

    def paths(self) -> list[Path]:
        return [
            self.metrics,
            self.per_group_consistency,
            self.per_group_diversity,
            self.entropy_gap_csv,
            self.entropy_gap_png,
            self.summary,
        ]


def _atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp)` on a temporary file next to `path`, then rename it onto `path`."""
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        tmp.chmod(0o644)  # mkstemp creates 0600; a report is meant to be read by others
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _with_columns(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """An empty frame without columns gets the declared header, so the CSV is still readable."""
    return pd.DataFrame(columns=columns) if frame.empty and frame.columns.empty else frame


def gap_long_format(consistency: pd.DataFrame) -> pd.DataFrame:
    """Per-group gaps in long format: columns group_id, model (base|tuned), gap."""
    rows = [
        {"group_id": row["group_id"], "model": model, "gap": float(row[f"{model}_gap"])}
        for _, row in consistency.iterrows()
        for model in MODELS
    ]
    return pd.DataFrame(rows, columns=["group_id", "model", "gap"])


def _plot_gaps(consistency: pd.DataFrame, metrics: dict, path: Path) -> None:
    """Scatter of per-group gap, base (x) vs tuned (y), with the y = x diagonal."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5, 5.0), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    summary = metrics.get("consistency", {})
    if len(consistency):
        base = consistency["base_gap"].astype(float)
        tuned = consistency["tuned_gap"].astype(float)
        top = max(float(base.max()), float(tuned.max()), 1e-3) * 1.05
        axes.plot([0, top], [0, top], linestyle="--", color="grey", linewidth=1, label="y = x")
        axes.scatter(base, tuned, s=24, alpha=0.8, label="group")
        axes.set_xlim(0, top)
        axes.set_ylim(0, top)
        axes.legend(loc="upper left")
        axes.text(
            0.98, 0.02, "below the diagonal: tuned more consistent", transform=axes.transAxes,
            ha="right", va="bottom", fontsize=8, color="grey",
        )  # fmt: skip
    else:
        axes.text(0.5, 0.5, "no consistency groups", ha="center", va="center")
    axes.set_xlabel("base entropy gap (nats)")
    axes.set_ylabel("tuned entropy gap (nats)")
    axes.set_title(
        f"entropy gap per group: mean base {_fmt(summary.get('base_mean_gap'))}, "
        f"tuned {_fmt(summary.get('tuned_mean_gap'))}",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, format="png")


def _fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _change(base: float | None, tuned: float | None, digits: int = 3) -> str:
    if base is None or tuned is None:
        return "n/a"
    change = f"{tuned - base:+.{digits}f}"
    return f"{change} ({(tuned - base) / base:+.1%})" if base else change


_CONSISTENCY_ROWS = (
    ("entropy gap (nats, lower is more consistent)", "base_mean_gap", "tuned_mean_gap"),
    ("helpfulness H_norm", "base_helpfulness", "tuned_helpfulness"),
    ("words per response", "base_mean_words", "tuned_mean_words"),
)
_DIVERSITY_ROWS = (
    ("distinct-1", "base_distinct_1", "tuned_distinct_1"),
    ("distinct-2", "base_distinct_2", "tuned_distinct_2"),
    ("validity", "base_validity", "tuned_validity"),
    ("coverage of valid answers", "base_coverage", "tuned_coverage"),
    ("TV distance to uniform (lower is better)", "base_tv_to_uniform", "tuned_tv_to_uniform"),
)


def render_markdown(metrics: dict) -> str:
    """Short markdown summary of `metrics.json`: metric | base | tuned | change table, tests."""
    consistency = metrics.get("consistency", {})
    diversity = metrics.get("diversity", {})
    rows = [("consistency", name, b, t) for name, b, t in _CONSISTENCY_ROWS]
    if diversity.get("n_tasks"):
        rows += [("diversity", name, b, t) for name, b, t in _DIVERSITY_ROWS]
    section = {"consistency": consistency, "diversity": diversity}
    lines = [
        "# Evaluation: base vs tuned",
        "",
        f"- consistency groups: {consistency.get('n_groups', 0)}",
        f"- diversity tasks: {diversity.get('n_tasks', 0)}",
        "",
        "| metric | base | tuned | change |",
        "|---|---|---|---|",
    ]
    for part, name, base_key, tuned_key in rows:
        base, tuned = section[part].get(base_key), section[part].get(tuned_key)
        digits = 1 if "words" in base_key else 3
        lines.append(
            f"| {name} | {_fmt(base, digits)} | {_fmt(tuned, digits)} "
            f"| {_change(base, tuned, digits)} |"
        )
    lines += [
        "",
        f"Relative gap reduction: {_fmt(consistency.get('relative_gap_reduction'))}. "
        f"Paired t-test on per-group gaps (n = {consistency.get('n_groups', 0)}): "
        f"t = {_fmt(consistency.get('t_statistic'))}, "
        f"p = {_fmt_p(consistency.get('p_value'))}; "
        f"Wilcoxon p = {_fmt_p(consistency.get('p_value_wilcoxon'))}; "
        f"significant: {_fmt(consistency.get('significant'))}.",
    ]
    notes = metrics.get("notes") or []
    if notes:
        lines += ["", "Notes:", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def _fmt_p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def write_report(
    out_dir: Path,
    consistency: pd.DataFrame,
    diversity: pd.DataFrame,
    metrics: dict,
) -> ReportFiles:
    """Write the evaluation report into `out_dir` (created if missing); returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(
        metrics=out_dir / "metrics.json",
        per_group_consistency=out_dir / "per_group_consistency.csv",
        per_group_diversity=out_dir / "per_group_diversity.csv",
        entropy_gap_csv=out_dir / "entropy_gap.csv",
        entropy_gap_png=out_dir / "entropy_gap.png",
        summary=out_dir / "summary.md",
    )
    metrics_text = json.dumps(metrics, indent=2, allow_nan=False) + "\n"  # fail before writing
    consistency = _with_columns(consistency, CONSISTENCY_COLUMNS)
    diversity = _with_columns(diversity, DIVERSITY_COLUMNS)

    _atomic_write(files.per_group_consistency, lambda p: consistency.to_csv(p, index=False))
    _atomic_write(files.per_group_diversity, lambda p: diversity.to_csv(p, index=False))
    gaps = gap_long_format(consistency)
    _atomic_write(files.entropy_gap_csv, lambda p: gaps.to_csv(p, index=False))
    _atomic_write(files.entropy_gap_png, lambda p: _plot_gaps(consistency, metrics, p))
    _atomic_write(files.summary, lambda p: p.write_text(render_markdown(metrics)))
    _atomic_write(files.metrics, lambda p: p.write_text(metrics_text))
    return files
