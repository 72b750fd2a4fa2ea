"""Evaluation report files: metrics.json (DVC metrics), statistics, per-group tables, plots,
a markdown summary and one self-contained HTML report.

Every file is written to a temporary sibling and moved into place with `os.replace`, so a reader
never sees a half-written file; `metrics.json` is written last, so its presence means the report
is complete. JSON is written with `allow_nan=False`: a NaN that slipped through fails loudly here
instead of reaching DVC or the gate.

metrics.json holds the gate's inputs (`consistency`, `diversity`), which engine produced them
(`engine`, with the fallback recorded) and `notes`; it holds no null outside the places the
gate allows one, and no timing (so `dvc metrics diff` compares results only). The per-metric tests
with bootstrap CIs and Benjamini–Hochberg q-values, and the generation throughput, go to
statistics.json and comparisons.csv (values there may be null); metric_deltas.csv holds the
base-vs-tuned rows alone (metric, delta, CI, q-value), the table behind DVC's `metric_deltas` plot.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from components.evaluation.comparisons import comparisons_frame
from components.evaluation.html_report import render_html
from components.evaluation.plots import (
    answer_frequency_long,
    metric_deltas_frame,
    plot_answer_frequency,
    plot_coverage,
    plot_gaps,
    plot_metric_deltas,
)
from components.evaluation.records import CONSISTENCY_COLUMNS, DIVERSITY_COLUMNS, MODELS
from components.evaluation.statistics import Comparison


@dataclass(frozen=True)
class ReportFiles:
    """Paths of the files `write_report` wrote."""

    metrics: Path
    statistics: Path
    comparisons: Path
    metric_deltas_csv: Path
    per_group_consistency: Path
    per_group_diversity: Path
    entropy_gap_csv: Path
    entropy_gap_png: Path
    answer_frequency_csv: Path
    answer_frequency_png: Path
    coverage_png: Path
    metric_deltas_png: Path
    summary: Path
    html: Path

    def paths(self) -> list[Path]:
        return [getattr(self, f.name) for f in fields(self)]

    def plots(self) -> list[Path]:
        return [self.entropy_gap_png, self.coverage_png, self.answer_frequency_png, self.metric_deltas_png]


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


def _fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _fmt_p(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _change(base: float | None, tuned: float | None, digits: int = 3) -> str:
    if base is None or tuned is None:
        return "n/a"
    change = f"{tuned - base:+.{digits}f}"
    return f"{change} ({(tuned - base) / base:+.1%})" if base else change


CONSISTENCY_ROWS = (
    ("entropy gap (nats, lower is more consistent)", "base_mean_gap", "tuned_mean_gap"),
    ("semantic agreement (modal meaning share)", "base_semantic_agreement", "tuned_semantic_agreement"),
    ("cross-variant cosine", "base_cross_variant_cosine", "tuned_cross_variant_cosine"),
    ("helpfulness H_norm", "base_helpfulness", "tuned_helpfulness"),
    ("words per response", "base_mean_words", "tuned_mean_words"),
    ("empty responses (share)", "base_empty_rate", "tuned_empty_rate"),
)
DIVERSITY_ROWS = (
    ("distinct-1", "base_distinct_1", "tuned_distinct_1"),
    ("distinct-2", "base_distinct_2", "tuned_distinct_2"),
    ("self-BLEU (lower is more diverse)", "base_self_bleu", "tuned_self_bleu"),
    ("Vendi score", "base_vendi", "tuned_vendi"),
    ("semantic entropy (nats)", "base_semantic_entropy", "tuned_semantic_entropy"),
    ("meaning clusters", "base_n_clusters", "tuned_n_clusters"),
    ("validity", "base_validity", "tuned_validity"),
    ("coverage of valid answers", "base_coverage", "tuned_coverage"),
    ("Unique@N", "base_unique_at_n", "tuned_unique_at_n"),
    ("TV distance to uniform (lower is better)", "base_tv_to_uniform", "tuned_tv_to_uniform"),
    ("KL to uniform (nats, lower is better)", "base_kl_to_uniform", "tuned_kl_to_uniform"),
    ("JS distance to uniform (lower is better)", "base_js_to_uniform", "tuned_js_to_uniform"),
    ("helpfulness H_norm", "base_helpfulness", "tuned_helpfulness"),
    ("words per response", "base_words", "tuned_words"),
    ("empty responses (share)", "base_empty_rate", "tuned_empty_rate"),
)

_CONSISTENCY_NAMES = {name for name, _, _ in CONSISTENCY_ROWS}  # a diversity row of the same name says so


def engine_banner(metrics: dict) -> str:
    """One line saying which engine ran; a loud warning when it is a fallback."""
    engine = metrics.get("engine") or {}
    if not engine:
        return ""
    if engine.get("fallback"):
        return (
            f"**WARNING: FALLBACK ENGINE.** Requested `{engine.get('requested')}`, evaluated with "
            f"`{engine.get('used')}` (eval.allow_fallback is true). Cause: {engine.get('fallback_reason')}"
        )
    return f"Generation engine: `{engine.get('used')}`."


def render_markdown(metrics: dict, comparisons: list[Comparison] | None = None) -> str:
    """Markdown summary: engine, metric | base | tuned | change tables, tests with CIs and q-values."""
    consistency = metrics.get("consistency", {})
    diversity = metrics.get("diversity", {})
    lines = ["# Evaluation: base vs tuned", ""]
    banner = engine_banner(metrics)
    if banner:
        lines += [f"> {banner}" if metrics["engine"].get("fallback") else banner, ""]
    lines += [
        f"- consistency groups: {consistency.get('n_groups', 0)}",
        f"- diversity tasks: {diversity.get('n_tasks', 0)}",
        "",
        "| metric | base | tuned | change |",
        "|---|---|---|---|",
    ]
    rows = [("consistency", *r) for r in CONSISTENCY_ROWS]
    if diversity.get("n_tasks"):
        rows += [("diversity", *r) for r in DIVERSITY_ROWS]
    section = {"consistency": consistency, "diversity": diversity}
    for part, name, base_key, tuned_key in rows:
        base, tuned = section[part].get(base_key), section[part].get(tuned_key)
        digits = 1 if "words" in base_key else 3
        label = f"{name} (diversity tasks)" if part == "diversity" and name in _CONSISTENCY_NAMES else name
        lines.append(
            f"| {label} | {_fmt(base, digits)} | {_fmt(tuned, digits)} | {_change(base, tuned, digits)} |"
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
    if comparisons:
        lines += ["", *comparison_table(comparisons)]
    notes = metrics.get("notes") or []
    if notes:
        lines += ["", "Notes:", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def comparison_table(comparisons: list[Comparison]) -> list[str]:
    """Markdown rows of every paired comparison (delta = b − a, CI, p-values, BH q-value)."""
    lines = [
        "## Paired tests (Benjamini–Hochberg within each family)",
        "",
        "| family | metric | model | a → b | n | delta (b − a) | CI | p (t) | p (Wilcoxon) | q (BH) | sig. |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        ci = "n/a" if c.ci_low is None else f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]"
        delta = "n/a" if c.delta is None else f"{c.delta:+.3f}"
        lines.append(
            f"| {c.family} | {c.metric} | {c.model or '-'} | {c.a} → {c.b} | {c.n} | {delta} | {ci} "
            f"| {_fmt_p(c.p_t)} | {_fmt_p(c.p_wilcoxon)} | {_fmt_p(c.q_bh)} | {'yes' if c.significant else 'no'} |"
        )
    return lines


def statistics_payload(comparisons: list[Comparison], settings: dict) -> dict:
    """Content of statistics.json: the settings and every comparison, per family."""
    families: dict[str, list[dict]] = {}
    for c in comparisons:
        families.setdefault(c.family, []).append(c.to_dict())
    return {"settings": settings, **families}


def write_report(
    out_dir: Path,
    consistency: pd.DataFrame,
    diversity: pd.DataFrame,
    metrics: dict,
    comparisons: list[Comparison] | None = None,
    settings: dict | None = None,
    generation: dict | None = None,
) -> ReportFiles:
    """Write the evaluation report into `out_dir` (created if missing); returns the paths."""
    comparisons = comparisons or []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(
        metrics=out_dir / "metrics.json",
        statistics=out_dir / "statistics.json",
        comparisons=out_dir / "comparisons.csv",
        metric_deltas_csv=out_dir / "metric_deltas.csv",
        per_group_consistency=out_dir / "per_group_consistency.csv",
        per_group_diversity=out_dir / "per_group_diversity.csv",
        entropy_gap_csv=out_dir / "entropy_gap.csv",
        entropy_gap_png=out_dir / "entropy_gap.png",
        answer_frequency_csv=out_dir / "answer_frequency.csv",
        answer_frequency_png=out_dir / "answer_frequency.png",
        coverage_png=out_dir / "coverage.png",
        metric_deltas_png=out_dir / "metric_deltas.png",
        summary=out_dir / "summary.md",
        html=out_dir / "report.html",
    )
    # fail before writing anything
    metrics_text = json.dumps(metrics, indent=2, allow_nan=False) + "\n"
    payload = {**statistics_payload(comparisons, settings or {}), "generation": generation or {}}
    statistics_text = json.dumps(payload, indent=2, allow_nan=False) + "\n"
    consistency = _with_columns(consistency, CONSISTENCY_COLUMNS)
    diversity = _with_columns(diversity, DIVERSITY_COLUMNS)
    summary = metrics.get("consistency", {})

    _atomic_write(files.per_group_consistency, lambda p: consistency.to_csv(p, index=False))
    _atomic_write(files.per_group_diversity, lambda p: diversity.to_csv(p, index=False))
    _atomic_write(files.entropy_gap_csv, lambda p: gap_long_format(consistency).to_csv(p, index=False))
    _atomic_write(files.answer_frequency_csv, lambda p: answer_frequency_long(diversity).to_csv(p, index=False))
    _atomic_write(files.comparisons, lambda p: comparisons_frame(comparisons).to_csv(p, index=False))
    _atomic_write(files.metric_deltas_csv, lambda p: metric_deltas_frame(comparisons).to_csv(p, index=False))
    _atomic_write(files.statistics, lambda p: p.write_text(statistics_text))
    _atomic_write(files.entropy_gap_png, lambda p: plot_gaps(consistency, summary, p))
    _atomic_write(files.coverage_png, lambda p: plot_coverage(diversity, p))
    _atomic_write(files.answer_frequency_png, lambda p: plot_answer_frequency(diversity, p))
    _atomic_write(files.metric_deltas_png, lambda p: plot_metric_deltas(comparisons, p))
    markdown = render_markdown(metrics, comparisons)
    _atomic_write(files.summary, lambda p: p.write_text(markdown))
    html = render_html(metrics, comparisons, consistency, diversity, files.plots(), engine_banner(metrics), generation or {})
    _atomic_write(files.html, lambda p: p.write_text(html, encoding="utf-8"))
    _atomic_write(files.metrics, lambda p: p.write_text(metrics_text))
    return files
