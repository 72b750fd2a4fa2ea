"""PromptGroup JSONL files: round trip, atomic writes, loading by task/split, error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.data.io import GroupFileError, load_groups, read_groups, write_groups
from components.data.schema import PromptGroup
from tests.grpo_data import diversity_group, gender_group


def _consistency(group_id: str, split: str = "train") -> PromptGroup:
    return gender_group(group_id, lambda g: f"I'm a {g}. Invest how?", split=split, variant_id=lambda g: f"{g}-p0")


def _diversity(group_id: str, split: str = "heldout") -> PromptGroup:
    return diversity_group(group_id, "Name a planet. Answer with just the name.", ["Mars", "Venus"], domain="planet", split=split)


@pytest.fixture
def groups() -> list[PromptGroup]:
    return [_consistency("investment-0000"), _diversity("planet-p0"), _consistency("investment-0001", "heldout")]


def test_round_trip(tmp_path: Path, groups: list[PromptGroup]) -> None:
    paths = write_groups(groups, tmp_path)
    assert paths == {
        "consistency": tmp_path / "consistency.jsonl",
        "diversity": tmp_path / "diversity.jsonl",
    }
    assert read_groups(paths["consistency"]) == [groups[0], groups[2]]
    assert read_groups(paths["diversity"]) == [groups[1]]
    lines = paths["consistency"].read_text().splitlines()
    assert [json.loads(line) for line in lines] == [groups[0].model_dump(mode="json"), groups[2].model_dump(mode="json")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["consistency.jsonl", "diversity.jsonl"]


def test_write_replaces_and_writes_empty_file(tmp_path: Path, groups: list[PromptGroup]) -> None:
    write_groups(groups, tmp_path)
    paths = write_groups(groups[:1], tmp_path)
    assert read_groups(paths["consistency"]) == groups[:1]
    assert paths["diversity"].read_text() == ""


def test_load_groups_filters_task_and_split(tmp_path: Path, groups: list[PromptGroup]) -> None:
    write_groups(groups, tmp_path)
    assert load_groups(tmp_path) == [groups[0], groups[2], groups[1]]
    assert load_groups(tmp_path, task="consistency", split="heldout") == [groups[2]]
    assert load_groups(tmp_path, split="heldout") == [groups[2], groups[1]]
    assert load_groups(tmp_path, task="diversity", split="train") == []
    with pytest.raises(ValueError, match="unknown task 'fairness'"):
        load_groups(tmp_path, task="fairness")
    with pytest.raises(ValueError, match="unknown split 'test'"):
        load_groups(tmp_path, split="test")


def test_load_groups_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"consistency\.jsonl: groups file not found"):
        load_groups(tmp_path, task="consistency")
    with pytest.raises(FileNotFoundError, match="no groups files"):
        load_groups(tmp_path)


def _file_with(tmp_path: Path, groups: list[PromptGroup], line3: str) -> Path:
    path = write_groups(groups, tmp_path)["consistency"]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, "", line3]) + "\n")  # blank line 3 skipped, bad line 4
    return path


def test_bad_json_names_file_and_line(tmp_path: Path, groups: list[PromptGroup]) -> None:
    path = _file_with(tmp_path, groups, '{"group_id": "x",')
    with pytest.raises(GroupFileError) as info:
        read_groups(path)
    assert str(info.value).startswith(f"{path}: line 4: <row>: not valid JSON")
    assert (info.value.path, info.value.line) == (path, 4)
    assert isinstance(info.value, ValueError)


def test_missing_field_names_field(tmp_path: Path, groups: list[PromptGroup]) -> None:
    row = groups[0].model_dump(mode="json")
    del row["members"][1]["text"]
    path = _file_with(tmp_path, groups, json.dumps(row))
    with pytest.raises(GroupFileError) as info:
        read_groups(path)
    assert str(info.value) == f"{path}: line 4: members.1.text: Field required"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("split", "test", r"line 4: split: Input should be 'train' or 'heldout'"),
        ("task", 3, r"line 4: task: Input should be 'consistency' or 'diversity'"),
        ("members", [], r"line 4: members: List should have at least 1 item"),
        ("colour", "red", r"line 4: colour: Extra inputs are not permitted"),
    ],
)
def test_schema_error_names_field_and_problem(tmp_path: Path, groups: list[PromptGroup], field: str, value: object, expected: str) -> None:
    row = groups[0].model_dump(mode="json") | {field: value}
    path = _file_with(tmp_path, groups, json.dumps(row))
    with pytest.raises(GroupFileError, match=expected) as info:
        read_groups(path)
    assert info.value.field == field


def test_prompts_property(groups: list[PromptGroup]) -> None:
    assert groups[0].prompts == ["I'm a woman. Invest how?", "I'm a man. Invest how?"]
