"""The speed table of README.md and docs/benchmarks.md: each headline speed figure per CPU kind, read
from the committed logs in results/speed/.

`results/speed/table.yaml` names the rows (a figure, its command and target) and, per CPU kind, the
committed log each cell is read from; the figure itself is read from that log by the row's reader
(`READERS`), so it is written once, in the log. A cell's date is the first ISO date in its log's
header (the lines starting with `#`). A kind with no committed log for a row says so.

    python -m components.study.speed_table          # print the table
    python -m components.study.headlines --write    # rewrite it (block `speed`) with the other generated blocks
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

from components.contracts.naming import NameRegistry
from components.formatting import duration, number, typographic
from components.study.reference_run import log_groups, make_run_seconds

SPEED = Path("results/speed")
TABLE = SPEED / "table.yaml"
NOT_MEASURED = "no committed log"
# how a row reads its figure from a log: (log name, log text, the cell's select) -> the figure
READERS: NameRegistry[Callable[[Path, str, str | None], str]] = NameRegistry("speed-table reader")


@READERS.register("make_run")
def _make_run(name: Path, text: str, select: str | None) -> str:
    return duration(make_run_seconds(name, text))


@READERS.register("installation")
def _installation(name: Path, text: str, select: str | None) -> str:
    """The median of the installer's wall-clock row (`select`, e.g. "A wall s") of a farm-bench table."""
    (median,) = log_groups(name, rf"^{re.escape(select or 'A wall s')}\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*$", text)
    return duration(float(median))


@READERS.register("test_suite")
def _test_suite(name: Path, text: str, select: str | None) -> str:
    """pytest's closing line: "1,416 passed in 32 min 26 s"."""
    passed, hours, minutes, seconds = log_groups(name, r"^=+ (\d+) passed.* in [\d.]+s \((\d+):(\d+):(\d+)\) =+$", text)
    return f"{int(passed):,} passed in {duration(int(hours) * 3600 + int(minutes) * 60 + int(seconds))}"


@READERS.register("against_trl")
def _against_trl(name: Path, text: str, select: str | None) -> str:
    """The start-up-included ratio of row `select` of benchmarks/train_throughput.py's table."""
    if not select:
        raise ValueError(f"{name}: the train-against-TRL reader needs the row (select:)")
    (ratio,) = log_groups(name, rf"^\| {re.escape(select)} \| [\d.]+ \| [\d.]+× \| ([\d.]+×) \|", text)
    return ratio


@READERS.register("decode")
def _decode(name: Path, text: str, select: str | None) -> str:
    """The first raw-decode line (JSON with `tok_s`) of a decode log whose `bind` is `select` (any when None)."""
    for line in text.splitlines():
        row = json.loads(line) if line.startswith("{") else {}
        if "tok_s" in row and (select is None or row.get("bind") == select):
            return f"{number(row['tok_s'], 1)} tokens/s"
    raise ValueError(f"{name}: no decode line (JSON with tok_s) for bind {select!r}")


@READERS.register("arm_evaluation")
def _arm_evaluation(name: Path, text: str, select: str | None) -> str:
    """The arm's evaluation line of benchmarks/arm_evaluation.py: seconds of one arm with the base shared."""
    (seconds,) = log_groups(name, r"^arm evaluation, the base shared: ([\d.]+) s", text)
    return duration(float(seconds))


class Cell(BaseModel):
    """One committed log and, where the log holds several rows, the one to read."""

    model_config = ConfigDict(extra="forbid")
    log: str
    select: str | None = None


class Row(BaseModel):
    """One figure: what it is, the command that measures it, its target, and its log per CPU kind."""

    model_config = ConfigDict(extra="forbid")
    figure: str
    reader: str
    command: str
    target: str
    cells: dict[str, Cell]

    @field_validator("reader")
    @classmethod
    def _known_reader(cls, reader: str) -> str:
        READERS.check([reader])
        return reader


class SpeedTable(BaseModel):
    """`results/speed/table.yaml`: the CPU kinds (column key -> heading) and the rows."""

    model_config = ConfigDict(extra="forbid")
    kinds: dict[str, str]
    rows: list[Row]

    def model_post_init(self, _context) -> None:
        for row in self.rows:
            unknown = sorted(set(row.cells) - set(self.kinds))
            if unknown:
                raise ValueError(f"row {row.figure!r}: CPU kinds {unknown} are not among kinds ({', '.join(self.kinds)})")


def load_table(root: Path) -> SpeedTable:
    return SpeedTable(**yaml.safe_load((Path(root) / TABLE).read_text()))


def log_date(name: Path, text: str) -> str:
    """The first ISO date (YYYY-MM-DD) of a log's header lines (`#`)."""
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    found = re.search(r"\b(\d{4}-\d{2}-\d{2})\b", header)
    if found is None:
        raise ValueError(f"{name}: its header (lines starting with #) names no date (YYYY-MM-DD)")
    return found[1]


def cell_text(root: Path, row: Row, kind: str, links_from: str = "") -> str:
    """One row's cell for `kind`: "**figure** · date · [log](path)", or `NOT_MEASURED`."""
    cell = row.cells.get(kind)
    if cell is None:
        return NOT_MEASURED
    name = SPEED / cell.log
    text = (Path(root) / name).read_text()
    value = READERS[row.reader](name, text, cell.select)
    return f"**{typographic(value)}** · {log_date(name, text)} · [log]({links_from}{name})"


def speed_table_lines(root: Path, links_from: str = "") -> list[str]:
    """The markdown table: a row per figure, a column per CPU kind (2-core machines, nothing else running)."""
    table = load_table(root)
    lines = [
        "| figure (command) | target | " + " | ".join(table.kinds.values()) + " |",
        "|---|---|" + "---|" * len(table.kinds),
    ]
    for row in table.rows:
        cells = " | ".join(cell_text(root, row, kind, links_from) for kind in table.kinds)
        lines.append(f"| {row.figure} (`{row.command}`) | {row.target} | {cells} |")
    return lines


if __name__ == "__main__":
    print("\n".join(speed_table_lines(Path("."))))
