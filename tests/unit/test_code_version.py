"""Which code ran (`components.code_version`), read from real git checkouts made here: clean, with a
changed source file, with a new untracked one, and outside git; and every MLflow run carries it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from components.code_version import COMMIT_TAG, DIFF_TAG, DIRTY_TAG, CodeVersion, code_version, read_code_version

ROOT = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> str:
    ident = ["-c", "user.name=groupwise-test", "-c", "user.email=test@groupwise.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "components").mkdir(parents=True)
    (repo / "components" / "a.py").write_text("x = 1\n")
    (repo / "params.yaml").write_text("seed: 1\n")
    (repo / ".gitignore").write_text("data/\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    return repo


def test_a_clean_checkout_names_its_commit_and_is_not_dirty(tmp_path):
    repo = checkout(tmp_path)
    version = read_code_version(repo)
    assert version == CodeVersion(git(repo, "rev-parse", "HEAD"), False, None)
    assert version.to_tags() == {COMMIT_TAG: version.commit, DIRTY_TAG: "false"}
    assert version.short == version.commit[:7]


def test_a_changed_or_new_source_file_is_dirty_with_a_digest_of_the_change(tmp_path):
    repo = checkout(tmp_path)
    head = git(repo, "rev-parse", "HEAD")
    (repo / "components" / "a.py").write_text("x = 2\n")
    changed = read_code_version(repo)
    assert changed.commit == head and changed.dirty is True and len(changed.diff_sha256) == 64
    assert changed.to_tags()[DIRTY_TAG] == "true" and changed.to_tags()[DIFF_TAG] == changed.diff_sha256
    assert changed.short == f"{head[:7]}+dirty.{changed.diff_sha256[:8]}"
    assert read_code_version(repo) == changed  # the same change, the same digest
    (repo / "components" / "b.py").write_text("y = 1\n")  # untracked, not ignored: part of the code that runs
    with_new = read_code_version(repo)
    assert with_new.dirty and with_new.diff_sha256 != changed.diff_sha256
    (repo / "components" / "b.py").write_text("y = 2\n")
    assert read_code_version(repo).diff_sha256 != with_new.diff_sha256  # its content counts, not only its name


def test_params_data_and_ignored_files_are_not_code(tmp_path):
    repo = checkout(tmp_path)
    (repo / "params.yaml").write_text("seed: 2\n")  # what `dvc exp run -S` does: the params hash records it
    (repo / "data").mkdir()
    (repo / "data" / "metrics.json").write_text("{}")
    assert read_code_version(repo).dirty is False


def test_outside_git_nothing_can_be_said(tmp_path):
    assert read_code_version(tmp_path) == CodeVersion("unknown", None)
    assert CodeVersion("unknown", None).to_tags() == {COMMIT_TAG: "unknown", DIRTY_TAG: "unknown"}
    assert CodeVersion.from_dict(CodeVersion("c" * 40, True, "d" * 64).to_dict()) == CodeVersion("c" * 40, True, "d" * 64)


def test_this_process_names_the_checkout_it_imports():
    assert code_version() == read_code_version(ROOT)
    assert code_version().commit == git(ROOT, "rev-parse", "HEAD")


def test_every_step_and_parent_run_carries_the_code(tmp_path):
    from mlflow import MlflowClient

    from components.config import TrackingConfig
    from components.tracking import runs

    cfg = TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=tmp_path / "artifacts")
    parent = runs.start_parent_run(cfg, "retrain")
    with runs.step_run(cfg, "build", {"seed": 1}, parent) as child:
        pass
    client = MlflowClient(cfg.uri)
    for run_id in (parent, child):
        tags = client.get_run(run_id).data.tags
        assert {k: tags.get(k) for k in code_version().to_tags()} == code_version().to_tags(), run_id


def test_a_confirmation_refuses_a_dirty_tree_in_one_line_and_another_study_runs(monkeypatch, tmp_path):
    """The git state is the outside system here: `code_version` is replaced by the two states it reports."""

    from flows import study as study_flow

    dirty = CodeVersion("a" * 40, True, "b" * 64)
    monkeypatch.setattr(study_flow, "code_version", lambda: dirty)

    def study(name, report):  # a study with no finished arm yet
        from components.config import StudyConfig
        from components.study.domain import Study

        return Study(name, StudyConfig(report=report), tmp_path / "results")

    confirmation = study("confirmation", "confirmation")
    try:
        study_flow.check_code_for(confirmation)
    except study_flow.DirtyTreeError as exc:
        assert str(exc) == (
            "studies/confirmation.yaml: a pre-registered confirmation runs committed code only, and the code at aaaaaaaaaaaa "
            "has uncommitted changes (diff bbbbbbbbbbbb): commit or stash them, then run it again"
        )
    else:
        raise AssertionError("a dirty tree ran a confirmation")
    study_flow.check_code_for(study("consistency", "consistency"))
    monkeypatch.setattr(study_flow, "code_version", lambda: CodeVersion("a" * 40, False))
    study_flow.check_code_for(confirmation)
