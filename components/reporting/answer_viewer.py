"""The answers themselves, side by side: per held-out consistency group, each variant's base and
tuned samples with their word entropy H (nats, the quantity the paper's gap averages), in one HTML
block of the report page. Groups are <details> blocks carrying their gaps as data attributes; a
few lines of inline script re-order them (gap change, base gap, group id). No external code.
"""

from __future__ import annotations

import html

import pandas as pd

from components.formatting import number, signed
from components.rewards.entropy import response_entropy

SORTS = {"change": "gap change (largest fall first)", "base": "base gap (largest first)", "id": "group id"}

_SCRIPT = """
(function () {
  var box = document.getElementById('viewer-groups'), pick = document.getElementById('viewer-sort');
  function key(el, by) { return by === 'id' ? el.dataset.id : parseFloat(el.dataset[by]); }
  function sort() {
    var by = pick.value, items = Array.prototype.slice.call(box.children);
    items.sort(function (a, b) {
      var x = key(a, by), y = key(b, by);
      if (by === 'id') return x < y ? -1 : x > y ? 1 : 0;
      if (by === 'base') return y - x;
      return x - y;  // change = tuned - base: the largest fall first
    });
    items.forEach(function (el) { box.appendChild(el); });
  }
  pick.addEventListener('change', sort);
  sort();
})();
"""

STYLE = """
.answers { table-layout: fixed; width: 100%; }
.answers td { text-align: left; vertical-align: top; overflow-wrap: anywhere; }
.answers td:first-child { width: 9em; }
.answers ol { margin: 0; padding-left: 1.4em; } .answers li { margin-bottom: 0.4em; }
.h { font-family: monospace; color: #555; margin-right: 0.4em; }
.cut { color: #a33; font-size: 0.85em; }
"""


def _answers(rows: pd.DataFrame) -> str:
    items = []
    for _, r in rows.sort_values("sample").iterrows():
        text = "" if pd.isna(r["text"]) else str(r["text"])
        cut = ' <span class="cut">[cut at max_new_tokens]</span>' if bool(r.get("truncated", False)) else ""
        items.append(f'<li><span class="h">H {number(response_entropy(text), 2)}</span>{html.escape(text) or "<em>(empty)</em>"}{cut}</li>')
    return f"<ol>{''.join(items)}</ol>"


def _gap(value: object) -> float:
    return float(value) if value is not None and not pd.isna(value) else float("nan")


def render_viewer(samples: pd.DataFrame, consistency: pd.DataFrame) -> str:
    """The viewer block: one <details> per consistency group in `consistency` that has samples."""
    if samples is None or samples.empty or consistency.empty:
        return "<p>No samples to show.</p>"
    by_group = {g: rows for g, rows in samples[samples["task"] == "consistency"].groupby("group_id", sort=False)}
    blocks = []
    for _, g in consistency.iterrows():
        rows = by_group.get(g["group_id"])
        if rows is None:
            continue
        base, tuned = _gap(g["base_gap"]), _gap(g["tuned_gap"])
        change = tuned - base
        body = []
        for variant, vrows in rows.groupby("variant_id", sort=False):
            cells = [_answers(vrows[vrows["model"] == m]) for m in ("base", "tuned")]
            body.append(f"<tr><td>{html.escape(str(variant))}</td><td>{cells[0]}</td><td>{cells[1]}</td></tr>")
        gid, domain = html.escape(str(g["group_id"])), html.escape(str(g.get("domain", "")))
        blocks.append(
            f'<details class="group" data-id="{gid}" data-change="{change:.6g}" data-base="{base:.6g}">'
            f"<summary>{gid} ({domain}): gap {number(base)} → {number(tuned)} ({signed(change)})</summary>"
            '<table class="answers"><thead><tr><th>variant</th><th>base answers</th><th>tuned answers</th></tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></details>"
        )
    options = "".join(f'<option value="{k}">{html.escape(v)}</option>' for k, v in SORTS.items())
    return (
        '<section id="viewer"><h2>Answers, side by side</h2>'
        "<p>Each held-out group's variants with every base and tuned sample and its word entropy H (nats); "
        "the gap compares the variants' mean H. "
        f'Sort groups by <select id="viewer-sort">{options}</select></p>'
        f'<div id="viewer-groups">{"".join(blocks)}</div>'
        f"<script>{_SCRIPT}</script></section>"
    )
