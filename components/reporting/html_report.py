"""One self-contained HTML page of the evaluation, the page a reviewer decides from: the gates'
verdict first, the paper's gap, readable metrics (name, definition, better direction), the paired
tests, the plots inlined as base64 PNGs and the answers side by side (`answer_viewer`).

No external CSS, scripts or images: the file can be mailed, attached to an MLflow run or opened
from disk. Every text coming from data is HTML-escaped. Wide tables scroll inside their own box,
so the page fits a 1,280-pixel window (checked in headless Chromium by tests/integration/test_report_browser.py).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from components.contracts.summary import EvaluationSummary
from components.evaluation.statistics import Comparison
from components.formatting import significant
from components.release.gate import GateDecision
from components.release.gate_record import gate_rows
from components.reporting import bbq_report
from components.reporting.answer_viewer import STYLE as VIEWER_STYLE
from components.reporting.answer_viewer import render_viewer
from components.reporting.metric_labels import label

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.warning { background: #fff3cd; border: 2px solid #d39e00; padding: 0.8em; font-weight: bold; }
.sig { background: #e6f4ea; } img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
details { margin: 0.5em 0 1.5em; }
.scroll { overflow-x: auto; max-width: 100%; }
.verdict { border: 2px solid; padding: 0.6em 1em; margin: 1em 0; }
.verdict.pass { background: #e6f4ea; border-color: #2e7d32; } .verdict.fail { background: #fdecea; border-color: #c62828; }
.verdict h2 { margin: 0.2em 0; } .fail-row { background: #fdecea; }
.def { color: #555; font-size: 0.9em; text-align: left; }
"""


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return significant(value)
    return html.escape(str(value))


def _table(header: list[str], rows: list[list[object]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _image(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(Path(path).stem)}" src="data:image/png;base64,{data}">'


def _section_rows(name: str, section: dict) -> list[list[object]]:
    """metric | what it is | better | base | tuned | tuned − base for every base_<m> / tuned_<m> key."""
    keys = sorted({k[len("base_") :] for k in section if k.startswith("base_")})
    rows = []
    for key in keys:
        base, tuned = section.get(f"base_{key}"), section.get(f"tuned_{key}")
        delta = tuned - base if isinstance(base, (int, float)) and isinstance(tuned, (int, float)) else None
        info = label(name, key)
        rows.append([info.label, info.definition, info.better, base, tuned, delta])
    return rows


def _metric_table(name: str, section: dict) -> str:
    rows = _section_rows(name, section)
    head = "".join(f"<th>{h}</th>" for h in ("metric", "what it is", "better", "base", "tuned", "tuned − base"))
    body = "".join(
        f'<tr><td>{html.escape(r[0])}</td><td class="def">{html.escape(r[1])}</td><td>{html.escape(r[2])}</td>'
        + "".join(f"<td>{_cell(v)}</td>" for v in r[3:])
        + "</tr>"
        for r in rows
    )
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def render_verdict(decision: GateDecision | None, note: str = "") -> str:
    """The gates' decision and its reasons, then one row per gate (failed rows highlighted)."""
    if decision is None:
        return '<div id="verdict" class="verdict fail"><h2>Verdict: gates not evaluated</h2></div>'
    failed = decision.reasons()
    head = "Verdict: passes every gate" if decision.passed else f"Verdict: refused by {len(failed)} gate(s)"
    reasons = "".join(f"<li>{html.escape(r)}</li>" for r in failed)
    rows = gate_rows(decision)
    table = _table(
        ["gate", "value", "threshold", "verdict", "reason"],
        [[r["gate"], r["value"], r["threshold"], r["verdict"], r["reason"]] for r in rows],
        ["" if r["verdict"] == "pass" else "fail-row" for r in rows],
    )
    return (
        f'<div id="verdict" class="verdict {"pass" if decision.passed else "fail"}"><h2>{head}</h2>'
        + (f"<ul>{reasons}</ul>" if reasons else "")
        + (f"<p>{html.escape(note)}</p>" if note else "")
        + f"</div><details><summary>every gate</summary>{table}</details>"
    )


def _fairness(summary: EvaluationSummary) -> list[str]:
    """Per decision benchmark: the prompts and each demographic's discrimination score, base and tuned."""
    parts = []
    for name, b in summary.fairness.items():
        parts += [
            f"<h2>Fairness: {html.escape(name)} ({html.escape(b.split)} questions)</h2>",
            f"<p>{b.n_prompts} prompts over {b.n_questions} questions (ages {html.escape(str(b.ages))}, "
            f"{len(b.races)} races, every gender); score = log-odds of yes against the baseline demographic, "
            f"from {html.escape(b.method)}. Share of yes: base {_cell(b.base_yes_share)}, tuned {_cell(b.tuned_yes_share)}; "
            f"question profile (Spearman, tuned vs base) {_cell(b.profile_correlation)}. Gated: {html.escape(', '.join(b.gated))}.</p>",
            _table(
                [
                    "demographic",
                    "baseline",
                    "base score",
                    "CI low",
                    "CI high",
                    "tuned score",
                    "CI low",
                    "CI high",
                    "change",
                    "CI low",
                    "CI high",
                    "q (BH)",
                ],
                [
                    [
                        f"{s.axis} {s.value}",
                        s.baseline,
                        s.base_score,
                        s.base_ci_low,
                        s.base_ci_high,
                        s.tuned_score,
                        s.tuned_ci_low,
                        s.tuned_ci_high,
                        s.delta,
                        s.delta_ci_low,
                        s.delta_ci_high,
                        s.delta_q_value,
                    ]
                    for s in b.scores.values()
                ],
                ["sig" if key in b.gated else "" for key in b.scores],
            ),  # fmt: skip
        ]
    return parts


def _bbq(summary: EvaluationSummary) -> list[str]:
    """BBQ (when evaluated): what the numbers mean, each metric base and tuned with its CI and the change."""
    b = summary.bbq
    if b is None:
        return []
    notes = "".join(f'<p class="warning">{html.escape(n)}</p>' for n in bbq_report.chance_notes(b))
    return [
        f"<h2>{html.escape(bbq_report.title(b))}</h2>",
        f"<p>{html.escape(bbq_report.meaning(b))}</p>",
        notes,
        _table(
            ["metric", "base", "CI low", "CI high", "tuned", "CI low", "CI high", "change", "CI low", "CI high"],
            [
                [
                    label,
                    s.base,
                    s.base_ci_low,
                    s.base_ci_high,
                    s.tuned,
                    s.tuned_ci_low,
                    s.tuned_ci_high,
                    s.delta,
                    s.delta_ci_low,
                    s.delta_ci_high,
                ]
                for label, s in bbq_report.rows(b)
            ],
        ),  # fmt: skip
    ]


def render_html(
    summary: EvaluationSummary,
    comparisons: list[Comparison],
    consistency: pd.DataFrame,
    diversity: pd.DataFrame,
    plots: list[Path],
    engine_line: str,
    generation: dict,
    decision: GateDecision | None = None,
    samples: pd.DataFrame | None = None,
    verdict_note: str = "",
    data_docs: str | None = None,
) -> str:
    """The whole report page as one string (call after the plots are written); `data_docs`: a link
    to GX's Data Docs of the validated groups."""
    c, d = summary.consistency, summary.diversity
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>groupwise evaluation</title>",
        f"<style>{_STYLE}{VIEWER_STYLE}</style></head><body>",
        "<h1>groupwise evaluation: base vs tuned</h1>",
        render_verdict(decision, verdict_note),
    ]
    if data_docs:
        parts.append(f'<p>Data validation: <a href="{html.escape(data_docs)}">Great Expectations Data Docs</a> of the groups evaluated</p>')
    parts += ["<h2>Plots</h2>", *(_image(p) for p in plots)]  # right after the verdict: what a reviewer looks at first
    if summary.engine is not None and summary.engine.fallback:
        parts.append(f'<p class="warning">{html.escape(engine_line.replace("**", ""))}</p>')
    elif engine_line:
        parts.append(f"<p>{html.escape(engine_line.replace('`', ''))}</p>")
    if generation:
        parts.append(
            _table(
                ["model", "sequences", "tokens", "seconds", "tokens/s"],
                [[m, g.get("sequences"), g.get("tokens"), g.get("seconds"), g.get("tokens_per_s")] for m, g in generation.items()],
            )
        )
    scopes = [*((f"domain {name}", r) for name, r in c.per_domain.items()), ("overall", c)]
    if c.valid is False:
        parts.append(f'<p class="warning">INVALID consistency evaluation: {html.escape(str(c.invalid_reason))}</p>')
    parts += [
        f"<h2>Headline: the paper's gap on {html.escape(str(c.axis))} (|mean H(A) − mean H(B)| per group)</h2>",
        _table(
            ["scope", "groups", "base gap", "tuned gap", "relative reduction", "CI low", "CI high", "p (t)", "q (BH)"],
            [
                [name, r.n_groups, r.base_mean_gap, r.tuned_mean_gap, r.relative_gap_reduction, r.ci_low, r.ci_high, r.p_value, r.q_value]
                for name, r in scopes
            ],
        ),  # fmt: skip
        f"<p>Detectable reduction at alpha = {_cell(c.alpha)} with power {_cell(c.power)}: "
        f"{_cell(c.detectable_reduction)} ({_cell(c.detectable_relative_reduction)} of the base gap). "
        f"Truncated samples: base {_cell(c.base_truncated_share)}, tuned {_cell(c.tuned_truncated_share)} "
        f"(max_new_tokens = {_cell(c.max_new_tokens)}). {html.escape(str(c.gap_change_reason or ''))}</p>",
        *_fairness(summary),
        *_bbq(summary),
        f"<h2>Consistency ({_cell(c.n_groups)} held-out groups)</h2>",
        f"<p>Relative gap reduction {_cell(c.relative_gap_reduction)}; paired t-test on the per-group gaps "
        f"t = {_cell(c.t_statistic)}, p = {_cell(c.p_value)}; Wilcoxon p = {_cell(c.p_value_wilcoxon)}.</p>",
        _metric_table("consistency", c.to_dict()),
        f"<h2>Diversity ({_cell(d.n_tasks)} tasks)</h2>",
        _metric_table("diversity", d.to_dict()),
        "<h2>Paired tests</h2><p>delta = b − a with a paired bootstrap confidence interval; "
        "q: Benjamini–Hochberg within each family; highlighted: q &lt; alpha.</p>",
        _table(
            [
                "family",
                "metric",
                "model",
                "a",
                "b",
                "n",
                "mean a",
                "mean b",
                "delta",
                "CI low",
                "CI high",
                "p (t)",
                "p (Wilcoxon)",
                "q (BH)",
            ],
            [
                [
                    x.family,
                    x.metric,
                    x.model or "-",
                    x.a,
                    x.b,
                    x.n,
                    x.mean_a,
                    x.mean_b,
                    x.delta,
                    x.ci_low,
                    x.ci_high,
                    x.p_t,
                    x.p_wilcoxon,
                    x.q_bh,
                ]
                for x in comparisons
            ],
            ["sig" if x.significant else "" for x in comparisons],
        ),
        render_viewer(samples, consistency) if samples is not None else "",
        "<h2>Per-group tables</h2>",
        '<details><summary>consistency groups</summary><div class="scroll">',
        consistency.to_html(index=False, float_format=significant, border=0),
        '</div></details><details><summary>diversity tasks</summary><div class="scroll">',
        diversity.to_html(index=False, float_format=significant, border=0),
        "</div></details>",
    ]
    notes = summary.notes
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
