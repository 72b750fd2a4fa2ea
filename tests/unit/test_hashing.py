"""The one file hasher: every recipe gives the digests recorded before it was the only one."""

from __future__ import annotations

import hashlib

from components.hashing import file_sha256, files_sha256
from components.validation.suite import groups_sha256
from components.validation.tokens import tokenizer_sha256


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
