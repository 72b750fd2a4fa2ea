"""metrics.json as one typed contract: every committed file reads and round-trips, a renamed or
missing field fails when the file is read (naming file and field), and the producer, the gates and
the reports name only fields the contract has."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from components.contracts.summary import (
    SCHEMA_VERSION,
    ConsistencySummary,
    DiversitySummary,
    EvaluationSummary,
    SummaryError,
    read_summary,
    write_summary,
)
from components.evaluation.summary import summarize
from components.release.gate import GateSpec, evaluate_gates, worsening
from tests.unit.test_gate import GATE
from tests.unit.test_report import consistency_frame, diversity_frame

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(ROOT.glob("results/consistency/arms/*/metrics.json"))


def file_keys(record: type) -> set[str]:
    return {record.key(name) for name in record.model_fields}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_every_committed_metrics_json_round_trips(path, tmp_path):
    original = json.loads(path.read_text())
    summary = read_summary(path)
    assert summary.to_dict() == original  # nothing added, nothing lost
    assert summary.consistency.base_words == original["consistency"]["base_mean_words"]  # one name in code
    written = json.loads(write_summary(tmp_path / "metrics.json", summary).read_text())
    assert written == {"schema_version": SCHEMA_VERSION, **original}
    assert list(written["consistency"]) == list(original["consistency"])  # same key order: a quiet git diff
    assert read_summary(tmp_path / "metrics.json") == summary


def test_there_are_committed_files_to_check():
    assert len(COMMITTED) >= 5


def good() -> dict:
    return json.loads((ROOT / "results/consistency/arms/grpo/metrics.json").read_text())


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))
    return path


def test_a_missing_field_fails_at_read_time_naming_file_and_field(tmp_path):
    data = good()
    del data["consistency"]["tuned_mean_gap"]
    path = write(tmp_path, data)
    with pytest.raises(SummaryError) as raised:
        read_summary(path)
    assert str(path) in str(raised.value) and "consistency.tuned_mean_gap: Field required" in str(raised.value)


def test_a_renamed_field_fails_at_read_time_naming_both_names(tmp_path):
    data = good()
    data["diversity"]["tuned_coverage_share"] = data["diversity"].pop("tuned_coverage")
    data["consistency"]["per_domain"]["job"]["q"] = data["consistency"]["per_domain"]["job"].pop("q_value")
    with pytest.raises(SummaryError) as raised:
        read_summary(write(tmp_path, data))
    message = str(raised.value)
    assert "diversity.tuned_coverage_share: Extra inputs are not permitted" in message
    assert "consistency.per_domain.job.q: Extra inputs are not permitted" in message


def test_a_wrong_type_or_a_foreign_file_fails_naming_it(tmp_path):
    data = good()
    data["consistency"]["n_groups"] = "many"
    with pytest.raises(SummaryError, match=r"consistency\.n_groups: Input should be a valid integer"):
        read_summary(write(tmp_path, data))
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(SummaryError, match=r"broken\.json: not JSON"):
        read_summary(tmp_path / "broken.json")
    with pytest.raises(SummaryError, match="schema_version 99 is newer"):
        read_summary(write(tmp_path, {**good(), "schema_version": 99}))


def test_optional_fields_stay_absent_and_words_read_under_both_names(tmp_path):
    data = good()
    del data["consistency"]["q_value"]  # written before BH: the gate judges p_value then
    data["consistency"]["base_words"] = data["consistency"].pop("base_mean_words")
    summary = read_summary(write(tmp_path, data))
    assert "q_value" not in summary.to_dict()["consistency"]
    assert summary.consistency.base_words == good()["consistency"]["base_mean_words"]
    assert summary.to_dict()["consistency"]["base_mean_words"] == summary.consistency.base_words
    significance = next(r for r in evaluate_gates(summary, GATE).results if r.name == "significance")
    assert "metrics have no q_value: unadjusted p_value judged" in significance.reason


def test_write_summary_is_atomic_readable_and_refuses_nan(tmp_path):
    summary = read_summary(COMMITTED[0])
    path = write_summary(tmp_path / "out" / "metrics.json", summary)
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert [p.name for p in path.parent.iterdir()] == ["metrics.json"]  # no temporary file left
    before = path.read_text()
    summary.consistency.tuned_mean_gap = float("nan")
    with pytest.raises(ValueError):
        write_summary(path, summary)
    assert path.read_text() == before


def test_summarize_writes_every_field_of_the_contract():
    """The producer and the contract name the same keys: a key renamed on one side fails here."""
    content = summarize(consistency_frame(), diversity_frame(), alpha=0.01)
    assert set(content["consistency"]) == file_keys(ConsistencySummary)
    assert set(content["diversity"]) == file_keys(DiversitySummary)
    summary = EvaluationSummary.from_dict(content)
    assert summary.to_dict() == content
    renamed = {**content, "consistency": {("gap_mean" if k == "base_mean_gap" else k): v for k, v in content["consistency"].items()}}
    with pytest.raises(SummaryError, match="consistency.base_mean_gap: Field required"):
        EvaluationSummary.from_dict(renamed)
    empty = summarize(pd.DataFrame(), pd.DataFrame(), alpha=0.01)
    assert EvaluationSummary.from_dict(empty).to_dict() == empty


def test_a_gate_naming_a_field_the_contract_lacks_fails_when_it_is_declared():
    with pytest.raises(KeyError, match="ConsistencySummary has no field 'base_mean_wordz'"):
        GateSpec("length", worsening, section="consistency", metric="mean_wordz", threshold="max_length_drop")
    with pytest.raises(KeyError, match="GateConfig has no field 'max_lenght_drop'"):
        GateSpec("length", worsening, section="consistency", metric="words", threshold="max_lenght_drop")


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_the_gates_judge_the_summary_as_they_judge_its_file(path):
    typed, raw = evaluate_gates(read_summary(path), GATE), evaluate_gates(json.loads(path.read_text()), GATE)
    assert typed == raw
