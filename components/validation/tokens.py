"""The base model's tokenizer, as the token rules of validation see it.

Prompt length is bounded in tokens (what costs memory and context), not characters, and a prompt
must not contain the tokenizer's special tokens (`<|im_start|>system ...` would reach the model as
control tokens inside the chat template). Both need the real tokenizer, which exists once
`groupwise prepare-model` has run; the report records which one checked the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.hashing import file_sha256

TOKENIZER_FILE = "tokenizer.json"


def tokenizer_sha256(model_dir: Path | None) -> str | None:
    """SHA-256 of the folder's tokenizer.json (None: no tokenizer there)."""
    path = None if model_dir is None else Path(model_dir) / TOKENIZER_FILE
    return file_sha256(path) if path is not None and path.is_file() else None


@dataclass(frozen=True)
class TokenizerInfo:
    tokenizer: object
    special_tokens: tuple[str, ...]
    sha256: str

    @classmethod
    def load(cls, model_dir: Path) -> "TokenizerInfo":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        special = set(tokenizer.all_special_tokens)
        special |= {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
        return cls(tokenizer, tuple(sorted(t for t in special if t)), tokenizer_sha256(model_dir) or "")

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
