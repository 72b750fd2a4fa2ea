"""The one file hasher: every recipe gives the digests recorded before it was the only one."""

from __future__ import annotations

import hashlib
from pathlib import Path

from components.config import load_params
from components.hashing import file_sha256, files_sha256, tree_files, tree_sha256
from components.validation.suite import groups_sha256
from components.validation.tokens import tokenizer_sha256
from flows.caching import input_key


def sha(data: bytes):
    return hashlib.sha256(data)


def test_file_and_files_recipes(tmp_path):
    a, b = tmp_path / "b.txt", tmp_path / "a.txt"
    a.write_bytes(b"one"), b.write_bytes(b"two")
    assert file_sha256(a) == sha(b"one").hexdigest()
    assert files_sha256([a, b]) == sha(b"a.txttwob.txtone").hexdigest()  # sorted, name then bytes
    (tmp_path / "tokenizer.json").write_bytes(b"{}")
    assert tokenizer_sha256(tmp_path) == sha(b"{}").hexdigest() and tokenizer_sha256(tmp_path / "none") is None


def test_absent_files_are_hashed_as_absent(tmp_path):
    """The validation report's recipe: name:size: then the bytes, a missing file as name:-1:."""
    (tmp_path / "consistency.jsonl").write_bytes(b"{}\n")
    expected = sha(b"consistency.jsonl:3:{}\ndiversity.jsonl:-1:").hexdigest()
    assert groups_sha256(tmp_path) == expected
    assert files_sha256([tmp_path / "diversity.jsonl", tmp_path / "consistency.jsonl"], absent_ok=True) == expected
    (tmp_path / "diversity.jsonl").write_bytes(b"")
    assert groups_sha256(tmp_path) == sha(b"consistency.jsonl:3:{}\ndiversity.jsonl:0:").hexdigest() != expected


def test_tree_recipe(tmp_path):
    """A cached step's inputs: relative path, then the SHA-256 digest of the bytes; no __pycache__."""
    folder, single = tmp_path / "pkg", tmp_path / "one.yaml"
    (folder / "sub").mkdir(parents=True)
    (folder / "__pycache__").mkdir()
    (folder / "sub" / "m.py").write_bytes(b"x = 1\n")
    (folder / "__pycache__" / "m.pyc").write_bytes(b"junk")
    single.write_bytes(b"a: 1\n")
    assert tree_files(folder) == [folder / "sub" / "m.py"] and tree_files(tmp_path / "none") == []
    expected = sha(b"sub/m.py" + sha(b"x = 1\n").digest() + b"one.yaml" + sha(b"a: 1\n").digest()).hexdigest()
    assert tree_sha256([folder, single, tmp_path / "none"]) == expected


def test_the_cache_key_depends_on_the_input_bytes(project):
    params = load_params(project / "params.yaml")
    before = input_key("build", params)
    template = next(Path(params.paths.templates).glob("*.yaml"))
    template.write_text(template.read_text() + "\n# changed\n")
    assert input_key("build", params) != before
