"""README.md is the product's front door: short, with a table of contents whose links land, quick
start, CLI and configuration near the top, and every relative link of it and of docs/*.md pointing
at a file (and heading) that exists. Pure text: nothing runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 300
TOP_LINES = 100
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, line) of every line outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation (backticks included) dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> list[tuple[int, int, str]]:
    """(line, level, text) of each heading outside code blocks."""
    return [(n, len(m[1]), m[2]) for n, line in prose_lines(path.read_text()) if (m := HEADING.match(line))]


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, _, text in headings(path):
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every markdown link outside code blocks and code spans."""
    return [(n, target) for n, line in prose_lines(path.read_text()) for target in LINK.findall(CODE_SPAN.sub("", line))]


def section(path: Path, title: str) -> str:
    text = path.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= MAX_LINES


def test_quick_start_cli_and_configuration_come_within_the_first_100_lines():
    found = {text: line for line, level, text in headings(README) if level == 2}
    for title in ("Contents", "Quick start", "CLI", "Configuration and profiles"):
        assert title in found, f"README has no '## {title}'"
        assert found[title] <= TOP_LINES, f"'## {title}' is on line {found[title]}, after line {TOP_LINES}"


def test_the_table_of_contents_links_to_headings_that_exist_and_names_every_section():
    contents = section(README, "Contents")
    listed = [target for target in LINK.findall(CODE_SPAN.sub("", contents))]
    assert listed and all(t.startswith("#") for t in listed), f"the table of contents links elsewhere: {listed}"
    listed_anchors = {t.removeprefix("#") for t in listed}
    missing = listed_anchors - anchors(README)
    assert not missing, f"the table of contents links to headings that do not exist: {sorted(missing)}"
    sections = {slug(text) for _, level, text in headings(README) if level == 2} - {"contents"}
    assert not sections - listed_anchors, f"sections missing from the table of contents: {sorted(sections - listed_anchors)}"


def test_quick_start_is_the_two_make_commands():
    block = section(README, "Quick start").split("```bash\n", 1)[1].split("\n```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
    assert commands == ["make run", "make test"]


STUDY_READMES = sorted((ROOT / "results").glob("*/README.md"))  # each study's design and findings


@pytest.mark.parametrize("path", [README, *DOCS, *STUDY_READMES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_a_file_and_heading_that_exist(path):
    broken = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"line {line}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"line {line}: {target} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_results_and_benchmarks_live_in_docs_and_the_readme_links_them():
    targets = {target.partition("#")[0] for _, target in links(README)}
    assert {"docs/results.md", "docs/benchmarks.md", "docs/training.md", "docs/evaluation.md"} <= targets


def test_the_readme_credits_discrimeval_where_the_fairness_evaluation_is_described():
    fairness = next(text for _, level, text in headings(README) if level == 2 and "DiscrimEval" in text)
    body = section(README, fairness)
    assert "Tamkin et al. 2023" in body and "CC BY 4.0" in body


PRODUCT_FILES = [
    README, *DOCS, *sorted((ROOT / "results").rglob("*.md")), *sorted((ROOT / "components").rglob("*.py")),
    *sorted((ROOT / "flows").rglob("*.py")), *sorted((ROOT / "studies").glob("*.yaml")), *sorted((ROOT / "data").glob("templates*/*.yaml")),
    ROOT / "params.yaml", ROOT / "pyproject.toml", ROOT / "Makefile",
]  # fmt: skip


@pytest.mark.parametrize("path", PRODUCT_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_project_history_or_outside_files_in_product_docs(path):
    text = path.read_text()
    for pattern in (r"\bstop[ -]?\d+\b", r"\bissue[ -]?#?\d+\b", r"\bissue's\b", r"the old README", r"this session",
                    r"\.\./shared", r"STACK_NOTES"):  # fmt: skip
        found = re.search(pattern, text, re.IGNORECASE)
        assert not found, f"{path.relative_to(ROOT)}: {found[0]!r}"
