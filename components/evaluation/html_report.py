"""One self-contained HTML page of the evaluation: tables, tests and the plots inlined as base64 PNGs.

No external CSS, scripts or images: the file can be mailed, attached to an MLflow run or opened
from disk. Every text coming from data is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from components.evaluation.statistics import Comparison

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.warning { background: #fff3cd; border: 2px solid #d39e00; padding: 0.8em; font-weight: bold; }
.sig { background: #e6f4ea; } img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
details { margin: 0.5em 0 1.5em; }
"""


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _table(header: list[str], rows: list[list[object]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _image(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(Path(path).stem)}" src="data:image/png;base64,{data}">'


def _section_rows(section: dict) -> list[list[object]]:
    keys = sorted({k[len("base_"):] for k in section if k.startswith("base_")})
    rows = []
    for key in keys:
        base, tuned = section.get(f"base_{key}"), section.get(f"tuned_{key}")
        delta = tuned - base if isinstance(base, (int, float)) and isinstance(tuned, (int, float)) else None
        rows.append([key, base, tuned, delta])
    return rows


def render_html(
    metrics: dict,
    comparisons: list[Comparison],
    consistency: pd.DataFrame,
    diversity: pd.DataFrame,
    plots: list[Path],
    engine_line: str,
    generation: dict,
) -> str:
    """The whole report page as one string (call after the plots are written)."""
    c, d = metrics.get("consistency", {}), metrics.get("diversity", {})
    engine = metrics.get("engine") or {}
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>groupwise evaluation</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>groupwise evaluation: base vs tuned</h1>",
    ]
    if engine.get("fallback"):
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
    scopes = [*((f"domain {name}", r) for name, r in (c.get("per_domain") or {}).items()), ("overall", c)]
    if not c.get("valid", True):
        parts.append(f'<p class="warning">INVALID consistency evaluation: {html.escape(str(c.get("invalid_reason")))}</p>')
    parts += [
        f"<h2>Headline: the paper's gap on {html.escape(str(c.get('axis')))} (|mean H(A) − mean H(B)| per group)</h2>",
        _table(
            ["scope", "groups", "base gap", "tuned gap", "relative reduction", "CI low", "CI high", "p (t)", "q (BH)"],
            [[name, r.get("n_groups"), r.get("base_mean_gap"), r.get("tuned_mean_gap"), r.get("relative_gap_reduction"),
              r.get("ci_low"), r.get("ci_high"), r.get("p_value"), r.get("q_value")] for name, r in scopes],
        ),  # fmt: skip
        f"<p>Detectable reduction at alpha = {_cell(c.get('alpha'))} with power {_cell(c.get('power'))}: "
        f"{_cell(c.get('detectable_reduction'))} ({_cell(c.get('detectable_relative_reduction'))} of the base gap). "
        f"Truncated samples: base {_cell(c.get('base_truncated_share'))}, tuned {_cell(c.get('tuned_truncated_share'))} "
        f"(max_new_tokens = {_cell(c.get('max_new_tokens'))}). {html.escape(str(c.get('gap_change_reason') or ''))}</p>",
        f"<h2>Consistency ({_cell(c.get('n_groups'))} held-out groups)</h2>",
        f"<p>Relative gap reduction {_cell(c.get('relative_gap_reduction'))}; paired t-test on the per-group gaps "
        f"t = {_cell(c.get('t_statistic'))}, p = {_cell(c.get('p_value'))}; Wilcoxon p = {_cell(c.get('p_value_wilcoxon'))}.</p>",
        _table(["metric", "base", "tuned", "tuned − base"], _section_rows(c)),
        f"<h2>Diversity ({_cell(d.get('n_tasks'))} tasks)</h2>",
        _table(["metric", "base", "tuned", "tuned − base"], _section_rows(d)),
        "<h2>Paired tests</h2><p>delta = b − a with a paired bootstrap confidence interval; "
        "q: Benjamini–Hochberg within each family; highlighted: q &lt; alpha.</p>",
        _table(
            ["family", "metric", "model", "a", "b", "n", "mean a", "mean b", "delta", "CI low", "CI high", "p (t)", "p (Wilcoxon)", "q (BH)"],
            [[x.family, x.metric, x.model or "-", x.a, x.b, x.n, x.mean_a, x.mean_b, x.delta, x.ci_low, x.ci_high, x.p_t, x.p_wilcoxon, x.q_bh] for x in comparisons],
            ["sig" if x.significant else "" for x in comparisons],
        ),
        "<h2>Plots</h2>",
        *(_image(p) for p in plots),
        "<h2>Per-group tables</h2>",
        "<details><summary>consistency groups</summary>",
        consistency.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0),
        "</details><details><summary>diversity tasks</summary>",
        diversity.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0),
        "</details>",
    ]
    notes = metrics.get("notes") or []
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
