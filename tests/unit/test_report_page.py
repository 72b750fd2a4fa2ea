"""report.html as the page a reviewer decides from: the verdict first with its reasons, readable
metric names, wide tables in their own scroll box, and every answer side by side, escaped."""

from __future__ import annotations

import re

import pandas as pd

from components.config import GateConfig
from components.evaluation.summary import summarize
from components.release.gate import evaluate_gates
from components.reporting.answer_viewer import render_viewer
from components.reporting.evaluation_report import write_report
from components.rewards.entropy import response_entropy
from tests.unit.test_report import comparisons_of, consistency_frame, diversity_frame


def sample_frame(consistency: pd.DataFrame, k: int = 2) -> pd.DataFrame:
    """k answers per variant (w, m) and model for every consistency group; one is hostile HTML."""
    rows = []
    for gid in consistency["group_id"]:
        for variant in ("w", "m"):
            for model in ("base", "tuned"):
                for j in range(k):
                    text = f"{model} answer {j} for {variant} in {gid}: save early, save often, diversify"
                    if gid == "g0" and variant == "w" and model == "tuned" and j == 0:
                        text = "<script>alert('x')</script> & more"
                    rows.append({"group_id": gid, "task": "consistency", "variant_id": variant, "model": model,
                                 "sample": j, "text": text, "n_tokens": 12, "mean_logprob": -1.0,
                                 "truncated": j == 1})  # fmt: skip
    return pd.DataFrame(rows)


def page_of(tmp_path, gate: GateConfig, samples: pd.DataFrame | None = None) -> str:
    consistency, diversity = consistency_frame(), diversity_frame()
    summary = summarize(consistency, diversity, alpha=0.01)
    decision = evaluate_gates(summary, gate)
    files = write_report(
        tmp_path, consistency, diversity, summary, comparisons_of(consistency, diversity),
        decision=decision, samples=samples if samples is not None else sample_frame(consistency), verdict_note="note <b>",
    )  # fmt: skip
    return files.html.read_text()


def test_the_verdict_comes_first_with_every_failed_gates_reason(tmp_path):
    gate = GateConfig()  # 3 groups cannot reach q < 0.01: significance fails
    decision = evaluate_gates(summarize(consistency_frame(), diversity_frame(), alpha=0.01), gate)
    assert not decision.passed
    page = page_of(tmp_path, gate)
    verdict = page.index('id="verdict"')
    assert verdict < page.index("<h2>Headline") and verdict < page.index("<table")
    block = page[verdict : page.index("</div>", verdict)]
    assert f"refused by {len(decision.reasons())} gate(s)" in block
    for reason in decision.reasons():
        assert reason.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;").replace('"', "&quot;") in block
    assert "note &lt;b&gt;" in block


def test_a_passing_evaluation_says_so(tmp_path):
    loose = GateConfig(
        require_significance=False,
        min_relative_gap_reduction=0.0,
        max_helpfulness_drop=1.0,
        max_length_drop=1.0,
        max_empty_rate_increase=1.0,
        max_coverage_drop=1.0,
        max_validity_drop=1.0,
        max_discrimination_increase=None,
        min_profile_correlation=None,
        max_compliance_drop=None,
    )  # fmt: skip  (no decision benchmark in this summary; its compliance falls 0.9 → 0.6)
    page = page_of(tmp_path, loose)
    assert 'class="verdict pass"><h2>Verdict: passes every gate</h2>' in page


def test_metrics_have_readable_names_definitions_and_directions(tmp_path):
    page = page_of(tmp_path, GateConfig())
    row = re.search(r"<tr><td>gender gap \(paper\)</td><td class=\"def\">([^<]+)</td><td>lower</td>", page)
    assert row and "averaged over groups" in row.group(1)
    assert "<td>truncated answers</td>" in page and "<td>coverage</td>" in page
    assert "<td>mean_gap</td>" not in page  # no raw key as a row label


def test_every_table_scrolls_inside_its_own_box(tmp_path):
    page = page_of(tmp_path, GateConfig())
    viewer_tables = page.count('<table class="answers">')  # fixed layout, wraps its text instead
    boxed = len(re.findall(r'<div class="scroll"><table', page)) + page.count('<div class="scroll">\n<table')
    assert page.count("<table") == boxed + viewer_tables


def test_the_viewer_shows_every_answer_with_its_entropy_escaped():
    consistency = consistency_frame()
    samples = sample_frame(consistency)
    block = render_viewer(samples, consistency)
    assert block.count('<details class="group"') == len(consistency)
    for _, g in consistency.iterrows():
        change = g["tuned_gap"] - g["base_gap"]
        assert f'data-id="{g["group_id"]}" data-change="{change:.6g}" data-base="{g["base_gap"]:.6g}"' in block
    assert "<script>alert" not in block and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in block
    text = samples.iloc[0]["text"]
    assert f'<span class="h">H {response_entropy(text):.2f}</span>{text}' in block
    assert block.count("[cut at max_new_tokens]") == int(samples["truncated"].sum())
    assert block.count("<li>") == len(samples)


def test_no_samples_no_viewer_rows():
    assert render_viewer(pd.DataFrame(), consistency_frame()) == "<p>No samples to show.</p>"


def test_the_page_links_the_data_docs_of_the_validated_groups_when_they_exist(tmp_path):
    consistency, diversity = consistency_frame(), diversity_frame()
    summary = summarize(consistency, diversity, alpha=0.01)
    docs = tmp_path / "validation" / "data_docs" / "index.html"
    out = tmp_path / "reports"
    files = write_report(out, consistency, diversity, summary, data_docs=docs)
    assert "Data Docs" not in files.html.read_text()  # not built: no dead link
    docs.parent.mkdir(parents=True)
    docs.write_text("<html></html>")
    files = write_report(out, consistency, diversity, summary, data_docs=docs)
    assert '<a href="../validation/data_docs/index.html">Great Expectations Data Docs</a>' in files.html.read_text()


def test_summary_md_and_the_page_open_with_the_verdict_then_the_plots(tmp_path):
    gate = GateConfig()
    decision = evaluate_gates(summarize(consistency_frame(), diversity_frame(), alpha=0.01), gate)
    page = page_of(tmp_path, gate)
    assert page.index('id="verdict"') < page.index("<h2>Plots</h2>") < page.index("<h2>Headline") < page.index("<h2>Paired tests")
    summary = (tmp_path / "summary.md").read_text()
    lines = summary.splitlines()
    assert lines[2] == f"## Verdict: refused by {len(decision.reasons())} gate(s)"
    for reason in decision.reasons():
        assert f"- {reason}" in summary
    assert summary.index("## Verdict") < summary.index("![entropy_gap](entropy_gap.png)") < summary.index("## Headline")
