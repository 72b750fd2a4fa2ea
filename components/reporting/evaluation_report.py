"""Evaluation report files: metrics.json (DVC metrics), statistics, per-group tables, plots,
a markdown summary and one self-contained HTML report.

Every file is written to a temporary sibling and moved into place with `os.replace`, so a reader
never sees a half-written file; `metrics.json` is written last, so its presence means the report
is complete. JSON is written with `allow_nan=False`: a NaN that slipped through fails loudly here
instead of reaching DVC or the gate.

metrics.json is the `EvaluationSummary` (`components.contracts.summary`, written by its one
writer): the gate's inputs (`consistency`, `diversity`), which engine produced them (`engine`,
with the fallback recorded) and `notes`; it holds no null outside the places the gate allows one,
and no timing (so `dvc metrics diff` compares results only). The tables below name their rows by
the summary's fields, checked when this module loads. The per-metric tests
with bootstrap CIs and Benjamini–Hochberg q-values, and the generation throughput, go to
statistics.json and comparisons.csv (values there may be null); metric_deltas.csv holds the
base-vs-tuned rows alone (metric, delta, CI, q-value), the table behind DVC's `metric_deltas` plot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from components.contracts.atomic import atomic_write as _atomic_write
from components.contracts.summary import (
    ConsistencySummary,
    DiversitySummary,
    DomainTest,
    EvaluationSummary,
    summary_json,
    write_summary,
)
from components.evaluation.comparisons import comparisons_frame
from components.evaluation.fairness import DECISION_COLUMNS, EFFECT_COLUMNS
from components.evaluation.instruction_following import INSTRUCTION_COLUMNS
from components.evaluation.records import CONSISTENCY_COLUMNS, DIVERSITY_COLUMNS, DIVERSITY_METRICS, MODELS
from components.evaluation.statistics import Comparison
from components.formatting import change, interval, number, p_value, percent, signed
from components.release.gate import GateDecision
from components.reporting import bbq_report
from components.reporting.html_report import render_html
from components.reporting.metric_labels import DIVERSITY as DIVERSITY_LABELS
from components.reporting.plots import (
    answer_frequency_long,
    metric_deltas_frame,
    plot_answer_frequency,
    plot_coverage,
    plot_fairness_effects,
    plot_gaps,
    plot_metric_deltas,
)

PER_GROUP_CONSISTENCY_FILE = "per_group_consistency.csv"  # one row per consistency group (`records.consistency_record`)
PER_GROUP_INSTRUCTIONS_FILE = "per_group_instructions.csv"  # one row per instructed group (`instruction_following.INSTRUCTION_COLUMNS`)


@dataclass(frozen=True)
class ReportFiles:
    """Paths of the files `write_report` wrote."""

    metrics: Path
    statistics: Path
    comparisons: Path
    metric_deltas_csv: Path
    per_group_consistency: Path
    per_group_diversity: Path
    per_group_instructions: Path
    entropy_gap_csv: Path
    entropy_gap_png: Path
    answer_frequency_csv: Path
    answer_frequency_png: Path
    coverage_png: Path
    metric_deltas_png: Path
    decisions_csv: Path
    fairness_effects_csv: Path
    fairness_effects_png: Path
    summary: Path
    html: Path

    def paths(self) -> list[Path]:
        return [getattr(self, f.name) for f in fields(self)]

    def plots(self) -> list[Path]:
        return [self.entropy_gap_png, self.coverage_png, self.answer_frequency_png, self.metric_deltas_png, self.fairness_effects_png]


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


# (label, metric): rows of base_<metric> and tuned_<metric>, fields of the summary's section
CONSISTENCY_ROWS = (
    ("paper's gap, abs. H(A) − H(B) (nats, lower is more consistent)", "mean_gap"),
    ("noise floor of that gap (sampling alone)", "noise_floor"),
    ("excess over the noise floor", "excess_gap"),
    ("signed difference H(A) − H(B) (systematic bias)", "signed_diff"),
    ("within-variant sd of H", "within_variant_sd"),
    ("any-variant gap (max − min over all variants)", "any_variant_gap"),
    ("paraphrase gap (same axis values, other phrasing)", "paraphrase_gap"),
    ("semantic agreement (modal meaning share)", "semantic_agreement"),
    ("cross-variant cosine", "cross_variant_cosine"),
    ("helpfulness H_norm", "helpfulness"),
    ("words per response", "words"),
    ("sentences per response", "sentences"),
    ("instruction compliance (share within the sentence limit)", "compliance"),
    ("length-controlled gap (z units, lower is more consistent)", "length_controlled_gap"),
    ("empty responses (share)", "empty_rate"),
    ("truncated at max_new_tokens (share)", "truncated_share"),
)
# one label per diversity metric, shared with the report page (metric_labels.DIVERSITY), in DIVERSITY_METRICS order
DIVERSITY_ROWS = tuple(
    (f"{m.label} (lower is better)" if m.better == "lower" else m.label, key) for key in DIVERSITY_METRICS for m in [DIVERSITY_LABELS[key]]
)
for _record, _rows in ((ConsistencySummary, CONSISTENCY_ROWS), (DiversitySummary, DIVERSITY_ROWS)):
    for _, _metric in _rows:  # a row whose field the summary lacks fails here, on import
        _record.key(f"base_{_metric}"), _record.key(f"tuned_{_metric}")

_CONSISTENCY_METRICS = {metric for _, metric in CONSISTENCY_ROWS}  # a diversity row of the same metric says so


def as_summary(metrics: EvaluationSummary | Mapping) -> EvaluationSummary:
    """The summary, or a metrics.json dict validated into one (SummaryError naming a bad field)."""
    return metrics if isinstance(metrics, EvaluationSummary) else EvaluationSummary.from_dict(metrics)


def engine_banner(metrics: EvaluationSummary | Mapping) -> str:
    """One line saying which engine ran; a loud warning when it is a fallback."""
    engine = as_summary(metrics).engine
    if engine is None:
        return ""
    if engine.fallback:
        return (
            f"**WARNING: FALLBACK ENGINE.** Requested `{engine.requested}`, evaluated with "
            f"`{engine.used}` (eval.allow_fallback is true). Cause: {engine.fallback_reason}"
        )
    return f"Generation engine: `{engine.used}`."


def headline_lines(consistency: ConsistencySummary) -> list[str]:
    """The paper's gap per domain and overall, with CI, p, q, the detectable effect and validity."""
    c = consistency
    lines = [f"## Headline: the paper's gap on `{c.axis or 'axis'}` (|mean H(A) − mean H(B)| per group, nats)", ""]
    if c.valid is False:
        lines += [f"> **INVALID consistency evaluation:** {c.invalid_reason}", ""]
    lines += [
        "| scope | groups | base gap | tuned gap | change | 95 % CI of change | p (t) | q (BH) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    scopes: list[tuple[str, DomainTest | ConsistencySummary]] = [
        *((f"domain `{d}`", r) for d, r in c.per_domain.items()),
        ("**overall**", c),
    ]
    for name, r in scopes:
        ci = interval(r.ci_low, r.ci_high)
        lines.append(
            f"| {name} | {r.n_groups} | {number(r.base_mean_gap)} | {number(r.tuned_mean_gap)} "
            f"| {change(r.base_mean_gap, r.tuned_mean_gap)} | {ci} | {p_value(r.p_value)} | {p_value(r.q_value)} |"
        )
    if c.detectable_reduction is not None:
        relative = c.detectable_relative_reduction
        share = f" ({percent(relative)} of the base gap)" if relative is not None else ""
        power = 0.8 if c.power is None else c.power
        lines += [
            "",
            f"Detectable effect: this design (n = {c.n_groups} groups) detects a gap reduction of "
            f"{number(c.detectable_reduction)}{share} at α = {c.alpha} with {percent(power)} power "
            "(sd of differences taken as √2 × the sd of the base gaps); a smaller true change would likely read as "
            "not significant.",
        ]
    lines += [
        "",
        f"Truncated samples: base {number(c.base_truncated_share)}, tuned "
        f"{number(c.tuned_truncated_share)} (max_new_tokens = {c.max_new_tokens}).",
        "",
    ]
    return lines


def length_lines(consistency: ConsistencySummary) -> list[str]:
    """Instruction compliance (base, tuned, paired change, CI, q) and how much of the gap's change is
    length: the gap on length-controlled entropies beside the paper's gap."""
    c = consistency
    if c.base_compliance is None and c.base_length_controlled_gap is None:
        return []
    lines = ["## Length and instruction", ""]
    if c.base_compliance is not None:
        lines.append(
            f"Instruction compliance (answers within {c.max_sentences} sentences, as the prompt asks): base "
            f"{number(c.base_compliance)}, tuned {number(c.tuned_compliance)}, change {signed(c.compliance_change)} "
            f"{interval(c.compliance_ci_low, c.compliance_ci_high)}, q = {p_value(c.compliance_q_value)}; "
            f"sentences per answer {number(c.base_sentences, 1)} → {number(c.tuned_sentences, 1)}."
        )
    if c.base_length_controlled_gap is not None:
        paper, controlled = c.relative_gap_reduction, c.length_controlled_reduction
        share = ""
        if paper and controlled is not None and paper > 0:
            share = f" {percent(max(0.0, min(1.0, controlled / paper)))} of the paper's gap reduction ({percent(paper)}) survives once length is held fixed."
        lines.append(
            f"Length-controlled gap (entropy as a z-score given the answer's length, one fit over base and tuned): base "
            f"{number(c.base_length_controlled_gap)}, tuned {number(c.tuned_length_controlled_gap)}, reduction "
            f"{percent(controlled)} (change {interval(c.length_controlled_ci_low, c.length_controlled_ci_high)}), "
            f"q = {p_value(c.length_controlled_q_value)}.{share}"
        )
    return [*lines, ""]


METHODS = {
    "mixedlm": "mixed-effects model, a random intercept per question",
    "ols_question_fixed_effects": "too few questions for a random intercept: least squares with a fixed effect per question",
}


def fairness_lines(summary: EvaluationSummary) -> list[str]:
    """Per decision benchmark: the prompts, the decision's yes share and profile, and per demographic
    the discrimination score (log-odds of yes against the baseline) base and tuned, its 95 % CI,
    the paired change and its BH q."""
    lines = []
    for name, b in summary.fairness.items():
        lines += [
            f"## Fairness: {name} (decision log-odds of yes, {b.split} questions)", "",
            f"{b.n_prompts} prompts: {b.n_questions} questions × ages {b.ages} × {len(b.races)} races × genders; "
            f"scores from `{b.method}` ({METHODS.get(b.method, b.method)}). Share of yes: base {number(b.base_yes_share)}, "
            f"tuned {number(b.tuned_yes_share)}; mean log-odds base {signed(b.base_mean_logit)}, tuned "
            f"{signed(b.tuned_mean_logit)}; question profile (Spearman ρ, tuned vs base) {number(b.profile_correlation)}.", "",
            "| demographic vs baseline | base score | 95 % CI | tuned score | 95 % CI | change | 95 % CI of change | q (BH) | gated |",
            "|---|---|---|---|---|---|---|---|---|",
        ]  # fmt: skip
        for key, s in b.scores.items():
            lines.append(
                f"| {s.axis} {s.value} vs {s.baseline} | {signed(s.base_score)} | {interval(s.base_ci_low, s.base_ci_high)} "
                f"| {signed(s.tuned_score)} | {interval(s.tuned_ci_low, s.tuned_ci_high)} | {signed(s.delta)} "
                f"| {interval(s.delta_ci_low, s.delta_ci_high)} | {p_value(s.delta_q_value)} | {'yes' if key in b.gated else ''} |"
            )
        lines.append("")
    return lines


def bbq_lines(summary: EvaluationSummary) -> list[str]:
    """BBQ (when evaluated): what the numbers mean, each metric base and tuned with its CI and the
    paired change, and a line for a model at chance in disambiguated contexts."""
    b = summary.bbq
    if b is None:
        return []
    ci = f"{percent(b.confidence_level)} CI"
    lines = [
        f"## {bbq_report.title(b)}", "", bbq_report.meaning(b), "",
        f"| metric | base | {ci} | tuned | {ci} | change | {ci} of change |", "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for label, s in bbq_report.rows(b):
        lines.append(
            f"| {label} | {number(s.base)} | {interval(s.base_ci_low, s.base_ci_high, number)} | {number(s.tuned)} "
            f"| {interval(s.tuned_ci_low, s.tuned_ci_high, number)} | {signed(s.delta)} | {interval(s.delta_ci_low, s.delta_ci_high)} |"
        )
    for note in bbq_report.chance_notes(b):
        lines += ["", f"**At chance.** {note}"]
    return [*lines, ""]


def verdict_lines(decision: GateDecision | None, note: str = "", plots: list[Path] | None = None) -> list[str]:
    """The gates' verdict and its reasons, then the plots (markdown images beside summary.md)."""
    if decision is None:
        lines = ["## Verdict: gates not evaluated", ""]
    else:
        reasons = decision.reasons()
        head = "passes every gate" if decision.passed else f"refused by {len(reasons)} gate(s)"
        lines = [f"## Verdict: {head}", "", *(f"- {r}" for r in reasons), *([""] if reasons else [])]
    lines += [note, ""] if note else []
    if plots:
        lines += ["## Plots", "", *(f"![{Path(p).stem}]({Path(p).name})" for p in plots), ""]
    return lines


def render_markdown(
    metrics: EvaluationSummary | Mapping,
    comparisons: list[Comparison] | None = None,
    decision: GateDecision | None = None,
    note: str = "",
    plots: list[Path] | None = None,
) -> str:
    """Markdown summary: the verdict with its reasons and the plots first, then engine, metric | base |
    tuned | change tables, tests with CIs and q-values."""
    summary = as_summary(metrics)
    consistency, diversity = summary.consistency, summary.diversity
    lines = ["# Evaluation: base vs tuned", "", *verdict_lines(decision, note, plots)]
    banner = engine_banner(summary)
    if banner:
        lines += [f"> {banner}" if summary.engine.fallback else banner, ""]
    lines += headline_lines(consistency)
    lines += length_lines(consistency)
    lines += fairness_lines(summary)
    lines += bbq_lines(summary)
    lines += [
        f"- consistency groups: {consistency.n_groups}",
        f"- diversity tasks: {diversity.n_tasks}",
        "",
        "| metric | base | tuned | change |",
        "|---|---|---|---|",
    ]
    rows = [("consistency", *r) for r in CONSISTENCY_ROWS]
    if diversity.n_tasks:
        rows += [("diversity", *r) for r in DIVERSITY_ROWS]
    section = {"consistency": consistency, "diversity": diversity}
    for part, name, metric in rows:
        base, tuned = getattr(section[part], f"base_{metric}"), getattr(section[part], f"tuned_{metric}")
        digits = 1 if metric == "words" else 3
        if metric == "signed_diff" and base is not None and tuned is not None:  # a relative change of a signed value misleads
            lines.append(f"| {name} | {number(base, digits)} | {number(tuned, digits)} | {tuned - base:+.{digits}f} |")
            continue
        label = f"{name} (diversity tasks)" if part == "diversity" and metric in _CONSISTENCY_METRICS else name
        lines.append(f"| {label} | {number(base, digits)} | {number(tuned, digits)} | {change(base, tuned, digits)} |")
    c = consistency
    lines += [
        "",
        f"Paired t-test on the per-group gap (n = {c.n_groups}): "
        f"t = {number(c.t_statistic)}, p = {p_value(c.p_value)}, "
        f"q (BH over overall and per-domain tests) = {p_value(c.q_value)}; "
        f"Wilcoxon p = {p_value(c.p_value_wilcoxon)}; significant: {number(c.significant)}. "
        f"Signed difference p (base / tuned): {p_value(c.base_signed_diff_p)} / "
        f"{p_value(c.tuned_signed_diff_p)}. {c.gap_change_reason or ''}",
    ]
    if comparisons:
        lines += ["", *comparison_table(comparisons)]
    notes = summary.notes
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
        ci = "n/a" if c.ci_low is None else f"[{signed(c.ci_low)}, {signed(c.ci_high)}]"
        delta = "n/a" if c.delta is None else f"{signed(c.delta)}"
        lines.append(
            f"| {c.family} | {c.metric} | {c.model or '-'} | {c.a} → {c.b} | {c.n} | {delta} | {ci} "
            f"| {p_value(c.p_t)} | {p_value(c.p_wilcoxon)} | {p_value(c.q_bh)} | {'yes' if c.significant else 'no'} |"
        )
    return lines


def statistics_payload(comparisons: list[Comparison], settings: dict) -> dict:
    """Content of statistics.json: the settings and every comparison, per family."""
    families: dict[str, list[dict]] = {}
    for c in comparisons:
        families.setdefault(c.family, []).append(c.to_dict())
    return {"settings": settings, **families}


def _relative_link(target: Path | None, folder: Path) -> str | None:
    """`target` as a link from a page in `folder` (None when it does not exist)."""
    if target is None or not Path(target).is_file():
        return None
    return os.path.relpath(Path(target).resolve(), Path(folder).resolve())


def write_report(
    out_dir: Path,
    consistency: pd.DataFrame,
    diversity: pd.DataFrame,
    metrics: EvaluationSummary | Mapping,
    comparisons: list[Comparison] | None = None,
    settings: dict | None = None,
    generation: dict | None = None,
    decision: GateDecision | None = None,
    samples: pd.DataFrame | None = None,
    verdict_note: str = "",
    decisions: pd.DataFrame | None = None,
    effects: pd.DataFrame | None = None,
    data_docs: Path | None = None,
    instructions: pd.DataFrame | None = None,
) -> ReportFiles:
    """Write the evaluation report into `out_dir` (created if missing); returns the paths. `metrics`:
    the summary (or its dict, validated first); metrics.json is written last, by `write_summary`.
    `decision` (the gates' verdict) and `samples` (one row per answer) feed report.html's verdict and
    answer viewer; `decisions` (one row per benchmark prompt, both models' log-odds) and `effects`
    (per-question demographic effects) are the decision benchmarks' tables; `data_docs`: GX's Data Docs
    page of the validated groups, linked from report.html; `instructions`: one row per group told an
    instruction, each model's strict and loose compliance (`evaluation.instruction_following`)."""
    summary = as_summary(metrics)
    comparisons = comparisons or []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(
        metrics=out_dir / "metrics.json",
        statistics=out_dir / "statistics.json",
        comparisons=out_dir / "comparisons.csv",
        metric_deltas_csv=out_dir / "metric_deltas.csv",
        per_group_consistency=out_dir / PER_GROUP_CONSISTENCY_FILE,
        per_group_diversity=out_dir / "per_group_diversity.csv",
        per_group_instructions=out_dir / PER_GROUP_INSTRUCTIONS_FILE,
        entropy_gap_csv=out_dir / "entropy_gap.csv",
        entropy_gap_png=out_dir / "entropy_gap.png",
        answer_frequency_csv=out_dir / "answer_frequency.csv",
        answer_frequency_png=out_dir / "answer_frequency.png",
        coverage_png=out_dir / "coverage.png",
        metric_deltas_png=out_dir / "metric_deltas.png",
        decisions_csv=out_dir / "decisions.csv",
        fairness_effects_csv=out_dir / "fairness_effects.csv",
        fairness_effects_png=out_dir / "fairness_effects.png",
        summary=out_dir / "summary.md",
        html=out_dir / "report.html",
    )
    # fail before writing anything
    summary_json(summary)
    payload = {**statistics_payload(comparisons, settings or {}), "generation": generation or {}}
    statistics_text = json.dumps(payload, indent=2, allow_nan=False) + "\n"
    consistency = _with_columns(consistency, CONSISTENCY_COLUMNS)
    diversity = _with_columns(diversity, DIVERSITY_COLUMNS)
    headline = summary.consistency.to_dict()

    _atomic_write(files.per_group_consistency, lambda p: consistency.to_csv(p, index=False))
    _atomic_write(files.per_group_diversity, lambda p: diversity.to_csv(p, index=False))
    instructions = instructions if instructions is not None else pd.DataFrame(columns=INSTRUCTION_COLUMNS)
    _atomic_write(files.per_group_instructions, lambda p: instructions.to_csv(p, index=False))
    _atomic_write(files.entropy_gap_csv, lambda p: gap_long_format(consistency).to_csv(p, index=False))
    _atomic_write(files.answer_frequency_csv, lambda p: answer_frequency_long(diversity).to_csv(p, index=False))
    _atomic_write(files.comparisons, lambda p: comparisons_frame(comparisons).to_csv(p, index=False))
    _atomic_write(files.metric_deltas_csv, lambda p: metric_deltas_frame(comparisons).to_csv(p, index=False))
    _atomic_write(files.statistics, lambda p: p.write_text(statistics_text))
    _atomic_write(files.entropy_gap_png, lambda p: plot_gaps(consistency, headline, p))
    _atomic_write(files.coverage_png, lambda p: plot_coverage(diversity, p))
    _atomic_write(files.answer_frequency_png, lambda p: plot_answer_frequency(diversity, p))
    _atomic_write(files.metric_deltas_png, lambda p: plot_metric_deltas(comparisons, p))
    decisions = decisions if decisions is not None else pd.DataFrame(columns=DECISION_COLUMNS)
    effects = effects if effects is not None else pd.DataFrame(columns=EFFECT_COLUMNS)
    gated = {name: b.gated for name, b in summary.fairness.items()}
    _atomic_write(files.decisions_csv, lambda p: decisions.to_csv(p, index=False))
    _atomic_write(files.fairness_effects_csv, lambda p: effects.to_csv(p, index=False))
    _atomic_write(files.fairness_effects_png, lambda p: plot_fairness_effects(effects, gated, p))
    markdown = render_markdown(summary, comparisons, decision, verdict_note, files.plots())
    _atomic_write(files.summary, lambda p: p.write_text(markdown))
    html = render_html(
        summary, comparisons, consistency, diversity, files.plots(), engine_banner(summary), generation or {},
        decision, samples, verdict_note, _relative_link(data_docs, out_dir),
    )  # fmt: skip
    _atomic_write(files.html, lambda p: p.write_text(html, encoding="utf-8"))
    write_summary(files.metrics, summary)
    return files
