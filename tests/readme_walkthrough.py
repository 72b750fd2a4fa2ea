"""The README's "Your own model and data" walkthrough, read from README.md: its bash block and the
commands in it. The unit tests check the block against the CLI and the example project; the
integration test runs it."""

from __future__ import annotations

import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Your own model and data"
FENCE = "```bash\n"
PORT = 8000  # the README's port; the integration test serves on a free one instead


def walkthrough_block(readme: Path = ROOT / "README.md") -> str:
    """The first bash block of the section, as a user copies it."""
    text = readme.read_text()
    section = text[text.index(SECTION) :]
    start = section.index(FENCE) + len(FENCE)
    return section[start : section.index("\n```", start) + 1]


def walkthrough_commands(block: str) -> list[list[str]]:
    """The block's command lines (continuations joined, comments dropped), each split as bash would."""
    lines = block.replace("\\\n", " ").splitlines()
    return [words for line in lines if (words := shlex.split(line, comments=True))]


def step_of(words: list[str]) -> str:
    """`groupwise train ...` -> "train"; any other command -> its program (`cd`, `python`, `curl`...)."""
    return words[1] if words[0] == "groupwise" else words[0]
