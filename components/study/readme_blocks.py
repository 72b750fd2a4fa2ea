"""Generated blocks of a markdown file: the lines between `<!-- NAME:start -->` and `<!-- NAME:end -->`.

The README's results (`components.study.headlines`) live in such blocks, so that a command rewrites
them in place from `results/` and a test compares them with what `results/` gives. The markers stay;
only the lines between them change. Nothing else of the file is touched.
"""

from __future__ import annotations

from pathlib import Path

from components.contracts.atomic import atomic_write_text


def markers(name: str) -> tuple[str, str]:
    """The start and end marker lines of block `name`."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def _span(lines: list[str], name: str) -> tuple[int, int]:
    start, end = markers(name)
    found = [i for i, line in enumerate(lines) if line.strip() == start], [i for i, line in enumerate(lines) if line.strip() == end]
    if len(found[0]) != 1 or len(found[1]) != 1 or found[0][0] >= found[1][0]:
        raise ValueError(f"expected one {start!r} line followed by one {end!r} line")
    return found[0][0], found[1][0]


def read_block(text: str, name: str) -> list[str]:
    """The lines between block `name`'s markers."""
    lines = text.splitlines()
    first, last = _span(lines, name)
    return lines[first + 1 : last]


def replace_block(text: str, name: str, body: list[str]) -> str:
    """`text` with block `name`'s lines replaced by `body` (the markers and everything else kept)."""
    lines = text.splitlines()
    first, last = _span(lines, name)
    out = [*lines[: first + 1], *body, *lines[last:]]
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def stale_blocks(path: Path, blocks: dict[str, list[str]]) -> list[str]:
    """Names of the blocks of file `path` whose lines differ from `blocks` (name -> generated lines)."""
    text = Path(path).read_text()
    return [name for name, body in blocks.items() if read_block(text, name) != body]


def write_blocks(path: Path, blocks: dict[str, list[str]]) -> list[str]:
    """Rewrite each block of `blocks` in file `path` in place; the names of those that changed."""
    text = Path(path).read_text()
    changed = [name for name, body in blocks.items() if read_block(text, name) != body]
    for name in changed:
        text = replace_block(text, name, blocks[name])
    if changed:
        atomic_write_text(Path(path), text)
    return changed
