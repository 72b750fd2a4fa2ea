"""report.html in a real browser: headless Chromium (Debian's `chromium`, installed by .ci/run)
renders a report with long answers at 1,280 px. The verdict is the first thing on the page, every
plot decodes, the viewer holds every group and sorts them, and nothing makes the page wider than
the window. Skipped where Chromium is missing, except in CI (GROUPWISE_REQUIRE_CHROMIUM=1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pandas as pd
import pytest

from components.config import GateConfig
from components.evaluation.summary import summarize
from components.release.gate import evaluate_gates
from components.reporting.evaluation_report import write_report
from tests.unit.test_report import comparisons_of, consistency_frame, diversity_frame

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("GROUPWISE_REQUIRE_CHROMIUM") == "1":
    raise RuntimeError("GROUPWISE_REQUIRE_CHROMIUM=1 but no chromium on PATH (.ci/run installs Debian's chromium)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")

PROBE = """
<script>
window.addEventListener('load', function () {
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var pick = document.getElementById('viewer-sort');
  function ids() { return Array.prototype.map.call(document.querySelectorAll('#viewer-groups > details'), function (d) { return d.dataset.id; }); }
  function sortBy(v) { pick.value = v; pick.dispatchEvent(new Event('change')); return ids(); }
  var verdict = document.getElementById('verdict'), first = document.querySelector('table');
  var wide = Array.prototype.filter.call(document.querySelectorAll('body *'), function (e) {
    var r = e.getBoundingClientRect(); return r.right > window.innerWidth + 1 && !e.closest('.scroll');
  }).map(function (e) { return e.tagName + '.' + e.className; });
  document.title = JSON.stringify({
    page: document.documentElement.scrollWidth, window: window.innerWidth, wide: wide.slice(0, 5),
    verdict_first: verdict.getBoundingClientRect().top < first.getBoundingClientRect().top,
    verdict: verdict.querySelector('h2').textContent,
    images: Array.prototype.map.call(document.images, function (i) { return i.naturalWidth; }),
    groups: ids().length, by_change: sortBy('change'), by_id: sortBy('id'), by_base: sortBy('base')
  });
});
</script>
"""


def long_report(tmp_path) -> tuple[str, pd.DataFrame]:
    n = 12
    consistency = consistency_frame(base_gaps=[0.1 * (i % 5) + 0.05 for i in range(n)], tuned_gaps=[0.03 * i for i in range(n)])
    consistency["group_id"] = [f"investment-question-with-a-long-identifier-{i:04d}" for i in range(n)]
    rows = []
    for gid in consistency["group_id"]:
        for variant in ("woman-paraphrase-0", "man-paraphrase-0"):
            for model in ("base", "tuned"):
                for j in range(6):
                    words = " ".join(f"word{(j * 7 + w) % 40}" for w in range(180))
                    rows.append({"group_id": gid, "task": "consistency", "variant_id": variant, "model": model, "sample": j,
                                 "text": words + " " + "x" * 400, "n_tokens": 300, "mean_logprob": -1.0, "truncated": False})  # fmt: skip
    diversity = diversity_frame()
    summary = summarize(consistency, diversity, alpha=0.01)
    files = write_report(
        tmp_path, consistency, diversity, summary, comparisons_of(consistency, diversity),
        decision=evaluate_gates(summary, GateConfig()), samples=pd.DataFrame(rows),
    )  # fmt: skip
    return files.html.read_text(), consistency


def render(tmp_path, page: str) -> dict:
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    out = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}",
         "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    title = out.stdout.split("<title>", 1)[1].split("</title>", 1)[0] if "<title>" in out.stdout else ""
    assert title.startswith("{"), f"the probe did not run: {out.stderr[-2000:]}"
    return json.loads(title.replace("&quot;", '"').replace("&amp;", "&"))


def test_the_report_reads_in_a_real_browser_at_1280_px(tmp_path):
    page, consistency = long_report(tmp_path)
    seen = render(tmp_path, page)
    assert seen["window"] == 1280
    assert seen["page"] <= seen["window"] and seen["wide"] == [], seen  # nothing overflows the window
    assert seen["verdict_first"] and seen["verdict"].startswith("Verdict: refused by")
    assert len(seen["images"]) == page.count("data:image/png;base64,") >= 4
    assert all(width > 0 for width in seen["images"])  # every plot decodes
    assert seen["groups"] == len(consistency)
    change = (consistency["tuned_gap"] - consistency["base_gap"]).to_numpy()
    expected = consistency.assign(change=change).sort_values("change", kind="stable")["group_id"].tolist()
    assert seen["by_change"] == expected
    assert seen["by_id"] == sorted(consistency["group_id"])
    assert seen["by_base"] == consistency.sort_values("base_gap", ascending=False, kind="stable")["group_id"].tolist()
