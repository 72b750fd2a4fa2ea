"""A study's report pools arms only when they ran one code, or code that differs where the study
allows (`components.study.arm_code`), against a real git repository made here; each arm's code is
listed in the report."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from components.code_version import CodeVersion
from components.config import StudyConfig
from components.study.arm_code import ArmCodeError, arm_codes, check_pooled_code, code_lines


def git(repo: Path, *args: str) -> str:
    ident = ["-c", "user.name=groupwise-test", "-c", "user.email=test@groupwise.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def history(tmp_path):
    """Three commits: a base, one that changes only docs/, one that changes components/."""
    repo = tmp_path / "repo"
    for folder in ("docs", "components"):
        (repo / folder).mkdir(parents=True)
    (repo / "docs" / "a.md").write_text("a\n")
    (repo / "components" / "m.py").write_text("x = 1\n")
    git(repo, "init", "-q")
    commits = []
    for change in (None, ("docs/a.md", "b\n"), ("components/m.py", "x = 2\n")):
        if change:
            (repo / change[0]).write_text(change[1])
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "c")
        commits.append(git(repo, "rev-parse", "HEAD"))
    return repo, commits


def clean(commit: str) -> CodeVersion:
    return CodeVersion(commit, False)


def test_one_code_or_differences_in_allowed_paths_pool(history):
    repo, (base, docs, _) = history
    check_pooled_code("studies/s.yaml", {"a": clean(base), "b": clean(base), "old": None}, [], repo)
    check_pooled_code("studies/s.yaml", {"a": clean(base), "b": clean(docs)}, ["docs"], repo)


def test_code_that_differs_elsewhere_or_uncommitted_code_is_refused_in_one_line(history):
    repo, (base, docs, code) = history
    with pytest.raises(ArmCodeError) as refused:
        check_pooled_code("studies/s.yaml", {"a": clean(base), "b": clean(code)}, ["docs"], repo)
    assert str(refused.value) == (
        f"studies/s.yaml: its arms ran different code ({base[:7]}: a; {code[:7]}: b); they differ outside code_differences "
        "['docs']: components/m.py: run the arms again on one commit, or list the paths that may differ under code_differences"
    )
    with pytest.raises(ArmCodeError, match="differ outside code_differences \\[\\]: docs/a.md"):
        check_pooled_code("studies/s.yaml", {"a": clean(base), "b": clean(docs)}, [], repo)
    dirty = CodeVersion(base, True, "d" * 64)
    with pytest.raises(ArmCodeError, match="uncommitted changes .* can be pooled only with itself"):
        check_pooled_code("studies/s.yaml", {"a": clean(base), "b": dirty}, ["docs", "components"], repo)
    with pytest.raises(ArmCodeError, match="git cannot compare"):
        check_pooled_code("studies/s.yaml", {"a": clean(base), "b": clean("f" * 40)}, ["components"], repo)


def test_the_records_name_each_arms_code_and_the_report_lists_it(tmp_path):
    for arm, code in (("a", {"commit": "c" * 40, "dirty": False, "diff_sha256": None}), ("b", None)):
        (tmp_path / arm).mkdir()
        (tmp_path / arm / "arm.json").write_text(json.dumps({"name": arm} | ({"code": code} if code else {})))
    codes = arm_codes(tmp_path)
    assert codes == {"a": CodeVersion("c" * 40, False), "b": None}
    assert code_lines(codes)[-4:] == ["|---|---|---|", f"| a | `{'c' * 12}` | none |", "| b | not recorded | |", ""]
    assert code_lines({"b": None}) == []  # records of before: the report is as it was


def test_a_confirmation_allows_no_code_difference():
    with pytest.raises(ValueError, match="a confirmation runs every arm on one code and allows none"):
        StudyConfig(report="confirmation", code_differences=["docs"])
    assert StudyConfig(report="consistency", code_differences=["docs"]).code_differences == ["docs"]


def test_a_study_pools_the_codes_of_the_studies_it_names_and_refuses_them_together(tmp_path, history):
    from components.study.arm_code import pooled_arm_codes
    from components.study.layout import StudyLayout

    repo, (base, _, code) = history
    main, other = StudyLayout(tmp_path / "results" / "main"), StudyLayout(tmp_path / "results" / "other")
    for layout, arm, commit in ((main, "new-s1", base), (other, "default-s1", code)):
        (layout.arms / arm).mkdir(parents=True)
        (layout.arms / arm / "arm.json").write_text(json.dumps({"name": arm, "code": {"commit": commit, "dirty": False}}))
    codes = pooled_arm_codes([main, other])
    assert codes == {"new-s1": clean(base), "other/default-s1": clean(code)}
    with pytest.raises(ArmCodeError, match=f"{base[:7]}: new-s1; {code[:7]}: other/default-s1"):
        check_pooled_code("studies/main.yaml", codes, [], repo)


def test_a_pooled_study_must_be_another_study_of_the_project():
    from components.config import Params

    pooled = {"report": "instruction_confirmation", "pooled_with": ["b"]}
    assert Params(studies={"a": pooled, "b": {}}).studies["a"].pooled_with == ["b"]
    with pytest.raises(ValueError, match=r"studies.a.pooled_with: \['c'\] are not other studies"):
        Params(studies={"a": pooled | {"pooled_with": ["c"]}, "b": {}})
    with pytest.raises(ValueError, match="a confirmation runs every arm on one code and allows none"):
        StudyConfig(report="instruction_confirmation", code_differences=["docs"])
