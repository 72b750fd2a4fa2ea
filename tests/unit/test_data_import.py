"""`groupwise import`: a user's own JSONL/CSV rows become the same groups files as built ones."""

import csv
import json

import pytest
from typer.testing import CliRunner

from components.config import DataConfig
from components.data import read_groups
from components.data.importer import ImportRowError, import_groups, read_rows, rows_to_groups
from components.validation import validate_groups
from components.validation.report import GroupValidationError
from flows.cli import app
from tests.conftest import ROOT, make_project

EXAMPLE = ROOT / "data" / "examples" / "groups.jsonl"


def _rows(*rows):
    return [(k + 1, dict(r)) for k, r in enumerate(rows)]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_example_file_imports_with_axes_from_its_domain_and_passes_the_validation_suite(tmp_path):
    groups, written = import_groups(EXAMPLE, tmp_path / "groups", DataConfig(), seed=0)
    by_id = {g.group_id: g for g in groups}
    assert by_id["salary-0"].split == "heldout" and by_id["salary-1"].split == "train"
    assert by_id["salary-0"].variant_axes == {"age": ["younger", "older"]}
    assert [m.attributes for m in by_id["pension-2"].members] == [{"age": "younger"}, {"age": "older"}]
    assert by_id["pick-colour"].valid_answers == ["red", "green", "blue", "yellow"]
    assert by_id["pick-colour"].members[0].variant_id == "v0"
    # what was written is what a built group file holds, and the real GX suite accepts it
    assert [g.group_id for g in read_groups(written["consistency"])] == [g.group_id for g in groups if g.task == "consistency"]
    report = validate_groups(tmp_path / "groups", DataConfig(), tmp_path / "report.json")
    assert report.success


def test_csv_with_attribute_columns_gives_the_same_groups_as_jsonl(tmp_path):
    rows = [
        {
            "group_id": "g1",
            "domain": "job",
            "split": "train",
            "variant_id": "w",
            "attributes": {"gender": "woman"},
            "text": "As a woman, how do I ask for a raise?",
        },
        {
            "group_id": "g1",
            "domain": "job",
            "split": "train",
            "variant_id": "m",
            "attributes": {"gender": "man"},
            "text": "As a man, how do I ask for a raise?",
        },
        {
            "group_id": "d1",
            "domain": "pick",
            "task": "diversity",
            "split": "heldout",
            "text": "Pick one of: a, b.",
            "valid_answers": ["a", "b"],
            "answer_normalizer": "casefold_match",
        },
    ]
    jsonl = _write_jsonl(tmp_path / "g.jsonl", rows)
    path = tmp_path / "g.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["group_id", "domain", "task", "split", "variant_id", "attr.gender", "text", "valid_answers", "answer_normalizer"])
        writer.writerow(["g1", "job", "", "train", "w", "woman", "As a woman, how do I ask for a raise?", "", ""])
        writer.writerow(["g1", "job", "", "train", "m", "man", "As a man, how do I ask for a raise?", "", ""])
        writer.writerow(["d1", "pick", "diversity", "heldout", "", "", "Pick one of: a, b.", "a; b", "casefold_match"])
    from_csv = rows_to_groups(path, read_rows(path), DataConfig(), 0)
    from_jsonl = rows_to_groups(jsonl, read_rows(jsonl), DataConfig(), 0)
    assert from_csv == from_jsonl


def test_split_is_assigned_by_group_when_no_row_sets_it_and_depends_on_the_seed_only():
    rows = _rows(
        *[
            {"group_id": f"g{k}", "domain": "job", "text": f"Question number {k}?", "attributes": {"gender": s}}
            for k in range(20)
            for s in ("woman", "man")
        ]
    )
    first = rows_to_groups("f.jsonl", rows, DataConfig(heldout_fraction=0.25), seed=3)
    again = rows_to_groups("f.jsonl", rows, DataConfig(heldout_fraction=0.25), seed=3)
    assert [g.split for g in first] == [g.split for g in again]
    assert sum(g.split == "heldout" for g in first) == 5  # a quarter of 20 groups; both variants of a group stay together


def test_answer_instruction_is_appended_to_every_consistency_prompt_alike():
    rows = _rows(
        {"group_id": "g", "domain": "job", "text": "Q as a woman?", "split": "train"},
        {"group_id": "g", "domain": "job", "text": "Q as a man?", "split": "train"},
    )
    (group,) = rows_to_groups("f.jsonl", rows, DataConfig(answer_instruction="Answer briefly."), 0)
    assert [m.text for m in group.members] == ["Q as a woman? Answer briefly.", "Q as a man? Answer briefly."]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"group_id": "g", "domain": "job"}], "f.jsonl: line 1: text: required, a non-empty string"),
        ([{"group_id": "g", "domain": "job", "text": "q", "tasks": "x"}], "f.jsonl: line 1: tasks: unknown field"),
        ([{"group_id": "g", "domain": "job", "text": "q", "task": "summary"}], "f.jsonl: line 1: task: must be one of"),
        ([{"group_id": "g", "domain": "job", "text": "q", "split": "test"}], "f.jsonl: line 1: split: must be one of"),
        (
            [
                {"group_id": "g", "domain": "job", "text": "q", "split": "train"},
                {"group_id": "g", "domain": "law", "text": "r", "split": "train"},
            ],
            "f.jsonl: line 2: domain: 'law' differs from line 1 of group 'g'",
        ),
        (
            [
                {"group_id": "g", "domain": "job", "text": "q", "variant_id": "a"},
                {"group_id": "g", "domain": "job", "text": "r", "variant_id": "a"},
            ],
            "f.jsonl: line 2: variant_id: 'a' repeats line 1",
        ),
        (
            [{"group_id": "g", "domain": "job", "text": "q", "split": "train"}, {"group_id": "h", "domain": "job", "text": "r"}],
            "f.jsonl: line 2: split: set in some rows and not in others",
        ),
        (
            [{"group_id": "g", "domain": "job", "text": "q", "attributes": {"age": 30}}],
            "f.jsonl: line 1: attributes: must map axis names to string values",
        ),
        (
            [{"group_id": "g", "domain": "x", "task": "diversity", "text": "q", "valid_answers": "a,b"}],
            "f.jsonl: line 1: valid_answers: must be a list of strings",
        ),
        (
            [
                {"group_id": "g", "domain": "job", "text": "As a woman, may I?", "attributes": {"gender": "woman"}},
                {"group_id": "g", "domain": "job", "text": "As a man of 70, may I?", "attributes": {"gender": "man", "age": "70"}},
            ],
            "f.jsonl: line 2: attributes: the variants of group 'g' differ beyond their axes (age: on 1 of 2 members)",
        ),
    ],
)
def test_bad_rows_fail_with_one_line_naming_file_line_field_and_rule(rows, expected):
    with pytest.raises(ImportRowError) as info:
        rows_to_groups("f.jsonl", _rows(*rows), DataConfig(), 0)
    assert str(info.value).startswith(expected)
    assert "\n" not in str(info.value)


def test_file_level_errors_name_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"group_id": "g", "domain": "job", "text": "q"}\n{not json\n')
    with pytest.raises(ImportRowError, match=r"bad.jsonl: line 2: <row>"):
        read_rows(bad)
    extra = tmp_path / "extra.csv"
    extra.write_text("group_id,domain,text,colour\ng,job,q,red\n")
    with pytest.raises(ImportRowError, match=r"extra.csv: line 1: colour: unknown column"):
        read_rows(extra)
    text = tmp_path / "g.txt"
    text.write_text("x")
    with pytest.raises(ImportRowError, match="unsupported file type '.txt'"):
        read_rows(text)
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes("group_id,domain,text\ng,job,q\ng,job,caf\u00e9?\n".encode("latin-1"))
    with pytest.raises(ImportRowError, match=r"latin1.csv: line 3: <row>: not valid UTF-8 \(byte 0xe9 at column 10\)"):
        read_rows(latin1)


def test_a_group_missing_a_value_of_its_domains_axis_is_refused_by_validation(tmp_path):
    rows = [
        {
            "group_id": "g1",
            "domain": "job",
            "split": "train",
            "attributes": {"gender": "woman"},
            "text": "As a woman, how do I ask for a raise?",
        },
        {
            "group_id": "g1",
            "domain": "job",
            "split": "train",
            "attributes": {"gender": "man"},
            "text": "As a man, how do I ask for a raise?",
        },
        {
            "group_id": "g2",
            "domain": "job",
            "split": "heldout",
            "attributes": {"gender": "woman"},
            "text": "As a woman, should I change careers?",
        },
        {
            "group_id": "g2",
            "domain": "job",
            "split": "heldout",
            "attributes": {"gender": "woman"},
            "variant_id": "w2",
            "text": "I am a woman. Should I change careers?",
        },
    ]
    import_groups(_write_jsonl(tmp_path / "g.jsonl", rows), tmp_path / "groups", DataConfig(), 0)
    with pytest.raises(GroupValidationError, match="g2|line 2"):
        validate_groups(tmp_path / "groups", DataConfig(), tmp_path / "report.json")


def test_cli_import_writes_validated_groups_and_refuses_a_bad_file_with_exit_2(tmp_path):
    project = make_project(tmp_path / "p", "tiny")
    runner = CliRunner()
    result = runner.invoke(app, ["import", str(EXAMPLE), "--params", str(project / "params.yaml")])
    assert result.exit_code == 0, result.output
    assert [g.group_id for g in read_groups(project / "data" / "groups" / "consistency.jsonl")][:2] == ["salary-0", "salary-1"]
    assert json.loads((project / "data" / "validation" / "report.json").read_text())["success"] is True

    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"group_id": "g", "domain": "job"}])
    before = (project / "data" / "groups" / "consistency.jsonl").read_bytes()
    result = runner.invoke(app, ["import", str(bad), "--params", str(project / "params.yaml")])
    assert result.exit_code == 2
    assert "bad.jsonl: line 1: text: required" in result.output
    assert (project / "data" / "groups" / "consistency.jsonl").read_bytes() == before  # nothing half-written
