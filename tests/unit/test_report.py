"""summarize() (the metrics.json content) and the report files written from it."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from components.contracts.summary import SCHEMA_VERSION
from components.evaluation.comparisons import COMPARISON_COLUMNS, compare_all
from components.evaluation.instruction_following import INSTRUCTION_COLUMNS
from components.evaluation.records import CONSISTENCY_COLUMNS, DIVERSITY_COLUMNS, DIVERSITY_METRICS
from components.evaluation.summary import summarize
from components.formatting import p_value
from components.reporting.evaluation_report import render_markdown, write_report
from components.reporting.plots import METRIC_DELTA_COLUMNS

CONSISTENCY_KEYS = {
    "axis", "n_groups", "base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "t_statistic",
    "p_value", "p_value_wilcoxon", "q_value", "ci_low", "ci_high", "significant", "per_domain",
    "base_helpfulness", "tuned_helpfulness",
    "base_mean_words", "tuned_mean_words", "base_semantic_agreement", "tuned_semantic_agreement",
    "base_cross_variant_cosine", "tuned_cross_variant_cosine", "base_empty_rate", "tuned_empty_rate",
    # the paper's gap split into sampling noise and a systematic part, and the other gaps
    "base_any_variant_gap", "tuned_any_variant_gap", "n_paraphrased_groups", "base_paraphrase_gap",
    "tuned_paraphrase_gap", "base_noise_floor", "tuned_noise_floor", "base_excess_gap", "tuned_excess_gap",
    "base_within_variant_sd", "tuned_within_variant_sd", "base_signed_diff", "base_signed_diff_p",
    "tuned_signed_diff", "tuned_signed_diff_p", "gap_change_reason",
    # what the design can detect, and whether the evaluation is valid at all
    "detectable_reduction", "detectable_relative_reduction", "observed_detectable_reduction", "power",
    "alpha", "base_truncated_share", "tuned_truncated_share", "max_new_tokens", "valid", "invalid_reason",
    # the instruction the prompts carry, and the gap once length is held fixed
    "max_sentences", "base_sentences", "tuned_sentences", "base_compliance", "tuned_compliance", "compliance_change",
    "compliance_ci_low", "compliance_ci_high", "compliance_p_value", "compliance_q_value", "base_length_controlled_gap",
    "tuned_length_controlled_gap", "length_controlled_reduction", "length_controlled_ci_low", "length_controlled_ci_high",
    "length_controlled_p_value", "length_controlled_q_value",
}  # fmt: skip
# keys of metrics.json["consistency"] that are not floats in a complete summary
NON_FLOAT_KEYS = {
    "axis", "n_groups", "n_paraphrased_groups", "significant", "per_domain", "gap_change_reason",
    "max_new_tokens", "valid", "invalid_reason", "max_sentences",
}  # fmt: skip
PER_DOMAIN_KEYS = {
    "n_groups", "base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "t_statistic", "p_value",
    "p_value_wilcoxon", "q_value", "ci_low", "ci_high",
}  # fmt: skip
DIVERSITY_KEYS = {"n_tasks", *(f"{m}_{name}" for name in DIVERSITY_METRICS for m in ("base", "tuned"))}


def consistency_frame(base_gaps=(0.5, 0.7, 0.4), tuned_gaps=(0.3, 0.4, 0.35)) -> pd.DataFrame:
    rows = []
    for i, (base, tuned) in enumerate(zip(base_gaps, tuned_gaps)):
        rows.append(
            {
                "group_id": f"g{i}",
                "domain": "job",
                "axis": "gender",
                "n_variants": 2,
                "n_samples": 8,
                "base_gap": base,
                "tuned_gap": tuned,
                # the other gaps and the noise split: floor 0.1 (base) / 0.05 (tuned), excess = gap − floor
                "base_any_variant_gap": base + 0.1,
                "tuned_any_variant_gap": tuned + 0.1,
                "base_paraphrase_gap": 0.2,
                "tuned_paraphrase_gap": 0.1,
                "base_signed_diff": -base,
                "tuned_signed_diff": -tuned,
                "base_noise_floor": 0.1,
                "tuned_noise_floor": 0.05,
                "base_excess_gap": base - 0.1,
                "tuned_excess_gap": tuned - 0.05,
                "base_within_variant_sd": 0.3,
                "tuned_within_variant_sd": 0.2,
                "base_truncated_share": 0.0,
                "tuned_truncated_share": 0.0,
                "base_semantic_agreement": 0.5,
                "tuned_semantic_agreement": 0.5 + 0.1 * i,
                "base_cross_variant_cosine": 0.4,
                "tuned_cross_variant_cosine": 0.6,
                "base_helpfulness": 0.6,
                "tuned_helpfulness": 0.5 + 0.1 * i,
                "base_words": 20.0,
                "tuned_words": 10.0 * (i + 1),
                "base_empty_rate": 0.0,
                "tuned_empty_rate": 0.25 * i,
                "max_sentences": 3,
                "base_sentences": 2.5,
                "tuned_sentences": 2.0 + i,
                "base_compliance": 0.9,
                "tuned_compliance": 0.8 - 0.2 * i,
                "base_length_controlled_gap": 2 * base,
                "tuned_length_controlled_gap": 2 * base - 0.1 * (i + 1),
                "base_variant_entropy": json.dumps({"w": 1.0, "m": 1.0 + base}),
                "tuned_variant_entropy": json.dumps({"w": 1.0, "m": 1.0 + tuned}),
                "base_axis_entropy": json.dumps({"gender=woman": 1.0, "gender=man": 1.0 + base}),
                "tuned_axis_entropy": json.dumps({"gender=woman": 1.0, "gender=man": 1.0 + tuned}),
            }  # fmt: skip
        )
    return pd.DataFrame(rows, columns=CONSISTENCY_COLUMNS)


def diversity_frame() -> pd.DataFrame:
    values = {
        "distinct_1": ((0.25, 1.0), (0.75, 1.0)), "distinct_2": ((0.0, 0.0), (0.5, 0.5)),
        "self_bleu": ((1.0, 0.2), (0.5, 0.1)), "vendi": ((1.0, 3.0), (2.0, 3.5)),
        "semantic_entropy": ((0.0, 1.0), (0.7, 1.3)), "n_clusters": ((1, 3), (2, 4)),
        "validity": ((1.0, 0.75), (0.5, 1.0)), "coverage": ((0.25, 0.75), (0.5, 1.0)),
        "all_valid": ((0.0, 0.0), (0.0, 1.0)),
        "unique_at_n": ((1, 3), (2, 4)), "tv_to_uniform": ((0.75, 0.25), (0.25, 0.0)),
        "kl_to_uniform": ((1.386, 0.288), (0.693, 0.0)), "js_to_uniform": ((0.6, 0.2), (0.3, 0.0)),
        "helpfulness": ((0.1, 0.2), (0.3, 0.3)), "words": ((1.0, 1.0), (2.0, 1.5)),
        "empty_rate": ((0.0, 0.0), (0.0, 0.25)),
    }  # fmt: skip
    rows = []
    for i in range(2):
        row = {"group_id": f"d{i}", "domain": "colors", "n_samples": 4, "n_valid_answers": 4}
        for name, pairs in values.items():
            row[f"base_{name}"], row[f"tuned_{name}"] = pairs[i]
        row["base_answer_counts"] = json.dumps({"red": 4} if i == 0 else {"red": 1, "blue": 1})
        row["tuned_answer_counts"] = json.dumps(
            {"red": 1, "green": 1, "blue": 1} if i == 0 else {"red": 1, "blue": 1, "green": 1, "yellow": 1}
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=DIVERSITY_COLUMNS)


def all_numbers_finite(obj) -> bool:
    if isinstance(obj, dict):
        return all(all_numbers_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(all_numbers_finite(v) for v in obj)
    return not isinstance(obj, float) or math.isfinite(obj)


# --- summarize ------------------------------------------------------------------------------------


def test_summarize_shape_and_values():
    metrics = summarize(consistency_frame(), diversity_frame(), alpha=0.01)
    assert set(metrics) == {"consistency", "diversity", "notes"}
    assert set(metrics["consistency"]) == CONSISTENCY_KEYS
    assert set(metrics["diversity"]) == DIVERSITY_KEYS
    c, d = metrics["consistency"], metrics["diversity"]
    assert c["n_groups"] == 3
    assert c["base_mean_gap"] == pytest.approx(1.6 / 3)
    assert c["tuned_mean_gap"] == pytest.approx(1.05 / 3)
    assert c["relative_gap_reduction"] == pytest.approx(0.55 / 1.6)
    t = 2.5235723
    assert c["t_statistic"] == pytest.approx(t, rel=1e-6)
    assert c["p_value"] == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-6)  # ≈ 0.128
    assert c["p_value_wilcoxon"] == pytest.approx(0.25)
    assert c["significant"] is False
    assert c["base_helpfulness"] == pytest.approx(0.6)
    assert c["tuned_helpfulness"] == pytest.approx(0.6)
    assert c["base_mean_words"] == pytest.approx(20.0)
    assert c["tuned_mean_words"] == pytest.approx(20.0)
    # compliance 0.9 → (0.8, 0.6, 0.4); the length-controlled gap 2·base → 2·base − (0.1, 0.2, 0.3)
    assert c["max_sentences"] == 3 and c["base_sentences"] == pytest.approx(2.5) and c["tuned_sentences"] == pytest.approx(3.0)
    assert (c["base_compliance"], c["tuned_compliance"], c["compliance_change"]) == pytest.approx((0.9, 0.6, -0.3))
    assert c["compliance_ci_low"] <= -0.3 <= c["compliance_ci_high"] and 0.1 < c["compliance_p_value"] < 0.2  # n = 3
    assert c["base_length_controlled_gap"] == pytest.approx(3.2 / 3)
    assert c["length_controlled_reduction"] == pytest.approx(0.6 / 3.2)
    assert c["length_controlled_p_value"] < 0.1
    # BH over the two tests: the larger p stays, the smaller is scaled by 2 / 1 at most to the larger
    ps = sorted([c["compliance_p_value"], c["length_controlled_p_value"]])
    assert sorted([c["compliance_q_value"], c["length_controlled_q_value"]]) == pytest.approx([min(2 * ps[0], ps[1]), ps[1]])
    assert d["n_tasks"] == 2
    assert d["base_coverage"] == pytest.approx(0.375)
    assert d["tuned_tv_to_uniform"] == pytest.approx(0.125)
    assert d["base_distinct_1"] == pytest.approx(0.5)
    assert c["axis"] == "gender"
    assert set(c["per_domain"]) == {"job"} and set(c["per_domain"]["job"]) == PER_DOMAIN_KEYS
    # one domain: its test is the overall test, BH over the two equal p-values leaves them as they are
    assert c["q_value"] == pytest.approx(c["p_value"])
    assert c["per_domain"]["job"]["q_value"] == pytest.approx(c["p_value"])
    assert c["ci_low"] <= c["tuned_mean_gap"] - c["base_mean_gap"] <= c["ci_high"]
    assert c["base_noise_floor"] == pytest.approx(0.1) and c["tuned_noise_floor"] == pytest.approx(0.05)
    assert c["base_excess_gap"] == pytest.approx(1.6 / 3 - 0.1)
    assert c["base_any_variant_gap"] == pytest.approx(1.6 / 3 + 0.1)
    assert c["n_paraphrased_groups"] == 3
    assert c["base_paraphrase_gap"] == pytest.approx(0.2) and c["tuned_paraphrase_gap"] == pytest.approx(0.1)
    assert c["base_signed_diff"] == pytest.approx(-1.6 / 3)
    assert c["valid"] is True and c["invalid_reason"] is None
    assert c["base_truncated_share"] == 0.0 and c["tuned_truncated_share"] == 0.0
    assert "systematic" in c["gap_change_reason"]
    assert metrics["notes"] == []
    assert all(type(v) is float for k, v in c.items() if k not in NON_FLOAT_KEYS)
    json.dumps(metrics, allow_nan=False)


def test_significant_follows_alpha():
    metrics = summarize(consistency_frame(), diversity_frame(), alpha=0.2)
    assert metrics["consistency"]["significant"] is True


def test_empty_diversity_gives_nulls_and_a_note():
    metrics = summarize(consistency_frame(), pd.DataFrame(), alpha=0.01)
    assert metrics["diversity"]["n_tasks"] == 0
    assert all(metrics["diversity"][k] is None for k in DIVERSITY_KEYS - {"n_tasks"})
    assert any(note.startswith("diversity:") for note in metrics["notes"])


def test_zero_base_gap_gives_null_relative_reduction():
    frame = consistency_frame(base_gaps=(0.0, 0.0, 0.0), tuned_gaps=(0.0, 0.0, 0.0))
    metrics = summarize(frame, diversity_frame(), alpha=0.01)
    c = metrics["consistency"]
    assert c["relative_gap_reduction"] is None
    assert c["t_statistic"] is None and c["p_value"] is None and c["p_value_wilcoxon"] is None
    assert c["significant"] is False
    assert c["detectable_reduction"] is None  # no spread of the base gaps to size a design from
    assert c["gap_change_reason"] == "the tuned gap is not lower than the base gap"
    assert any("p_value is null" in note for note in metrics["notes"])
    json.dumps(metrics, allow_nan=False)


def test_zero_base_gap_says_why_relative_reduction_is_null():
    # summarize's contract: an undefined value is null and `notes` says why
    frame = consistency_frame(base_gaps=(0.0, 0.0, 0.0), tuned_gaps=(0.0, 0.0, 0.0))
    metrics = summarize(frame, diversity_frame(), alpha=0.01)
    assert any("relative_gap_reduction is null" in note for note in metrics["notes"])


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match="tuned_gap"):
        summarize(consistency_frame().drop(columns=["tuned_gap"]), diversity_frame(), 0.01)


# --- report files ---------------------------------------------------------------------------------


def comparisons_of(consistency, diversity):
    return compare_all(consistency, diversity, alpha=0.01, n_resamples=200, confidence=0.9, seed=0)


def test_write_report_files(tmp_path):
    consistency, diversity = consistency_frame(), diversity_frame()
    metrics = summarize(consistency, diversity, alpha=0.01)
    metrics["engine"] = {"requested": "vllm", "used": "vllm", "fallback": False, "fallback_reason": ""}
    comparisons = comparisons_of(consistency, diversity)
    generation = {"base": {"sequences": 6, "tokens": 60, "seconds": 1.5, "tokens_per_s": 40.0}}
    files = write_report(tmp_path / "report", consistency, diversity, metrics, comparisons, {"alpha": 0.01}, generation)

    assert all(path.is_file() for path in files.paths())
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == sorted(
        p.name for p in files.paths()
    )  # no temporary files left behind
    text = files.metrics.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"schema_version": SCHEMA_VERSION, **metrics}  # the summary, versioned
    assert all_numbers_finite(json.loads(text))

    assert list(pd.read_csv(files.per_group_consistency).columns) == CONSISTENCY_COLUMNS
    assert len(pd.read_csv(files.per_group_diversity)) == 2
    assert list(pd.read_csv(files.per_group_instructions).columns) == INSTRUCTION_COLUMNS  # no group told an instruction: the header
    gaps = pd.read_csv(files.entropy_gap_csv)
    assert list(gaps.columns) == ["group_id", "model", "gap"]
    assert len(gaps) == 6 and set(gaps["model"]) == {"base", "tuned"}
    g1 = gaps[gaps["group_id"] == "g1"].set_index("model")["gap"]
    assert g1["base"] == pytest.approx(0.7) and g1["tuned"] == pytest.approx(0.4)
    assert files.entropy_gap_png.read_bytes().startswith(b"\x89PNG")

    summary = files.summary.read_text()
    assert "| metric | base | tuned | change |" in summary
    assert "consistency groups: 3" in summary
    assert f"p = {p_value(metrics['consistency']['p_value'])}" in summary
    assert "Generation engine: `vllm`." in summary and "FALLBACK" not in summary
    assert "| base_vs_tuned | consistency.gap | - | base → tuned | 3 |" in summary

    statistics = json.loads(files.statistics.read_text())
    assert statistics["settings"] == {"alpha": 0.01} and statistics["generation"] == generation
    assert len(statistics["base_vs_tuned"]) + len(statistics["variants"]) == len(comparisons)
    table = pd.read_csv(files.comparisons)
    assert list(table.columns) == COMPARISON_COLUMNS and len(table) == len(comparisons)
    # the DVC bar plot's table: base vs tuned alone, one row per metric, with its CI
    deltas = pd.read_csv(files.metric_deltas_csv)
    assert list(deltas.columns) == METRIC_DELTA_COLUMNS == ["metric", "delta", "ci_low", "ci_high", "q_bh", "significant"]
    by_tuned = table[table.family == "base_vs_tuned"]
    assert list(deltas.metric) == list(by_tuned.metric) and deltas.metric.is_unique
    assert "response_entropy" not in set(deltas.metric)  # the variants family stays in comparisons.csv
    gap = deltas.set_index("metric").loc["consistency.gap"]
    assert gap["delta"] == pytest.approx(1.05 / 3 - 1.6 / 3)
    assert gap["ci_low"] <= gap["delta"] <= gap["ci_high"]
    assert deltas[["delta", "ci_low", "ci_high"]].notna().all().all()
    frequencies = pd.read_csv(files.answer_frequency_csv)
    d0_tuned = frequencies[(frequencies.group_id == "d0") & (frequencies.model == "tuned")]
    assert dict(zip(d0_tuned.answer, d0_tuned["count"])) == {"red": 1, "green": 1, "blue": 1}
    for png in files.plots():
        assert png.read_bytes().startswith(b"\x89PNG")

    # one self-contained page: every plot inlined, no external resource
    page = files.html.read_text()
    assert page.count("data:image/png;base64,") == len(files.plots())
    assert 'src="http' not in page and "href=" not in page
    assert "consistency.gap" in page and "g1" in page


def test_fallback_is_loud_in_summary_and_html(tmp_path):
    consistency, diversity = consistency_frame(), diversity_frame()
    metrics = summarize(consistency, diversity, alpha=0.01)
    reason = "vllm engine could not start: <boom> & co"
    metrics["engine"] = {"requested": "vllm", "used": "transformers", "fallback": True, "fallback_reason": reason}
    files = write_report(tmp_path, consistency, diversity, metrics, comparisons_of(consistency, diversity))
    summary = files.summary.read_text()
    assert "> **WARNING: FALLBACK ENGINE.** Requested `vllm`, evaluated with `transformers`" in summary
    assert reason in summary
    page = files.html.read_text()
    assert '<p class="warning">WARNING: FALLBACK ENGINE.' in page
    assert "&lt;boom&gt; &amp; co" in page and "<boom>" not in page  # data is escaped


def test_write_report_with_empty_diversity_and_nulls(tmp_path):
    consistency = consistency_frame(base_gaps=(0.2,), tuned_gaps=(0.1,))
    metrics = summarize(consistency, pd.DataFrame(), alpha=0.01)
    files = write_report(tmp_path, consistency, pd.DataFrame(), metrics)
    assert json.loads(files.metrics.read_text())["consistency"]["p_value"] is None
    assert list(pd.read_csv(files.per_group_diversity).columns) == DIVERSITY_COLUMNS
    assert "n/a" in files.summary.read_text()
    deltas = pd.read_csv(files.metric_deltas_csv)  # no comparisons: the header alone
    assert list(deltas.columns) == METRIC_DELTA_COLUMNS and deltas.empty


def test_write_report_refuses_nan_before_writing(tmp_path):
    metrics = summarize(consistency_frame(), diversity_frame(), alpha=0.01)
    metrics["consistency"]["tuned_mean_gap"] = float("nan")
    with pytest.raises(ValueError):
        write_report(tmp_path, consistency_frame(), diversity_frame(), metrics)
    assert not (tmp_path / "metrics.json").exists()


def test_render_markdown_table_rows():
    metrics = summarize(consistency_frame(), diversity_frame(), alpha=0.01)
    text = render_markdown(metrics)
    gap_rows = [line for line in text.splitlines() if line.startswith("| paper's gap")]
    assert len(gap_rows) == 1 and gap_rows[0].endswith("| 0.533 | 0.350 | -0.183 (-34.4 %) |")
    assert "| coverage of the valid set | 0.375 | 0.875 |" in text
    assert "| empty responses (share) | 0.000 | 0.250 | +0.250 |" in text  # consistency, base 0: no %
    assert "| empty answers (lower is better) (diversity tasks) | 0.000 | 0.125 | +0.125 |" in text
    no_diversity = render_markdown(summarize(consistency_frame(), pd.DataFrame(), alpha=0.01))
    assert "distinct-1" not in no_diversity


def test_markdown_leads_with_the_headline_per_domain():
    metrics = summarize(consistency_frame(), diversity_frame(), alpha=0.01)
    text = render_markdown(metrics)
    headline = text.index("## Headline: the paper's gap on `gender`")
    assert headline < text.index("| metric | base | tuned | change |")
    # one domain: its row and the overall row carry the same test (q = p, see the summary test)
    assert "| domain `job` | 3 | 0.533 | 0.350 | -0.183 (-34.4 %) | [-0.300, -0.050] | 0.13 | 0.13 |" in text
    assert "| **overall** | 3 | 0.533 | 0.350 | -0.183 (-34.4 %) | [-0.300, -0.050] | 0.13 | 0.13 |" in text
    assert f"detects a gap reduction of {metrics['consistency']['detectable_reduction']:.3f}" in text
    assert "INVALID" not in text
    metrics["consistency"].update(valid=False, invalid_reason="12.0% of tuned samples were cut")
    assert "> **INVALID consistency evaluation:** 12.0% of tuned samples were cut" in render_markdown(metrics)


def test_html_has_the_headline_section(tmp_path):
    consistency, diversity = consistency_frame(), diversity_frame()
    metrics = summarize(consistency, diversity, alpha=0.01)
    metrics["consistency"].update(valid=False, invalid_reason="cut <answers>")
    page = write_report(tmp_path, consistency, diversity, metrics).html.read_text()
    assert "<h2>Headline: the paper's gap on gender" in page
    assert "domain job" in page and "overall" in page
    assert '<p class="warning">INVALID consistency evaluation: cut &lt;answers&gt;</p>' in page


def test_markdown_table_rows_have_as_many_cells_as_their_header():
    # a "|" inside a cell (e.g. a label "|H(A) − H(B)|") would split it into extra columns
    consistency, diversity = consistency_frame(), diversity_frame()
    text = render_markdown(summarize(consistency, diversity, alpha=0.01), comparisons_of(consistency, diversity))
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = line.replace("\\|", "").count("|")  # an escaped pipe stays in its cell
        if header is None:
            header = cells
        assert cells == header, line


def test_each_delta_panel_knows_which_side_is_better():
    from types import SimpleNamespace

    from components.reporting.plots import DIRECTION_ENDS, better_direction

    def side(family: str, metric: str) -> str:
        return better_direction(SimpleNamespace(family=family, metric=metric))

    assert side("consistency", "gap") == "lower" and side("consistency", "compliance") == "higher"
    assert side("consistency", "signed_diff") == "closer to 0" and side("consistency", "words") == "context"
    assert side("diversity", "coverage") == "higher" and side("diversity", "kl_to_uniform") == "lower"
    assert side("consistency", "not_a_metric") == "context"
    assert DIRECTION_ENDS["lower"] == ("← better", "worse →") and DIRECTION_ENDS["higher"] == ("← worse", "better →")
