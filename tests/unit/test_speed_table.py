"""The speed table per CPU kind (`components.study.speed_table`): each cell read from a committed log."""

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from components.study.speed_table import NOT_MEASURED, READERS, SPEED, load_table, log_date, speed_table_lines

ROOT = Path(__file__).resolve().parents[2]

LOGS = {
    "make_run.txt": "# cd clone && /usr/bin/time -v make run (installation included: 68 s)\n# 2026-12-02, 2-core CPU\n"
    "\tElapsed (wall clock) time (h:mm:ss or m:ss): 11:48.37\n",
    "install.txt": "# make setup, 2026-12-02\n                  min      median      max\nA wall s     27.9    29.64    30.1\nB wall s   279.1   300.5   350.2\n",
    "suite.txt": "# CI=true make test, 2026-12-03\n================ 1416 passed, 19 warnings in 1946.16s (0:32:26) ================\n",
    "trl.txt": "# train_throughput.py, 2026-11-30\n| row | samples/s (loop) | × TRL (loop) | × TRL (whole run, start-up included) | loop s |\n"
    "| groupwise-vllm | 0.457 | 3.27× | 2.88× | 210.0 |\n| groupwise-vllm-bf16 | 0.752 | 5.38× | 4.54× | 127.7 |\n",
    "decode.txt": '# raw decode, 2026-12-03\n{"bind": "0", "tok_s": 163.5}\n{"bind": "0-1", "tok_s": 294.5}\n{"bind": "0-1", "tok_s": 297.2}\n',
    "arm.txt": "# arm_evaluation.py --run, 2026-12-05\narm evaluation, the base shared: 2520.4 s (target 1800 s)\n",
}


def project(tmp_path: Path, rows: list[dict], kinds: dict | None = None) -> Path:
    speed = tmp_path / SPEED
    speed.mkdir(parents=True)
    for name, text in LOGS.items():
        (speed / name).write_text(text)
    (speed / "table.yaml").write_text(
        yaml.safe_dump({"kinds": kinds or {"avx2": "AVX2 only", "amx": "AMX-BF16"}, "rows": rows}, sort_keys=False)
    )
    return tmp_path


def row(reader: str, cells: dict, figure: str = "a figure") -> dict:
    return {"figure": figure, "reader": reader, "command": "cmd", "target": "≤ 1", "cells": cells}


@pytest.mark.parametrize(
    ("reader", "cell", "figure"),
    [
        ("make_run", {"log": "make_run.txt"}, "10 min 40 s"),  # 11:48 less the installation's 68 s
        ("installation", {"log": "install.txt", "select": "A wall s"}, "29.6 s"),  # the median column
        ("installation", {"log": "install.txt", "select": "B wall s"}, "5 min 0 s"),
        ("test_suite", {"log": "suite.txt"}, "1,416 passed in 32 min 26 s"),
        ("against_trl", {"log": "trl.txt", "select": "groupwise-vllm-bf16"}, "4.54×"),  # start-up included, not the loop's 5.38×
        ("against_trl", {"log": "trl.txt", "select": "groupwise-vllm"}, "2.88×"),
        ("decode", {"log": "decode.txt", "select": "0-1"}, "294.5 tokens/s"),  # the first line of that binding
        ("arm_evaluation", {"log": "arm.txt"}, "42 min 0 s"),
    ],
)
def test_each_reader_takes_its_figure_from_the_log_with_the_date_and_link(tmp_path, reader, cell, figure):
    root = project(tmp_path, [row(reader, {"amx": cell})])
    header, rule, line = speed_table_lines(root, links_from="../")
    assert header == "| figure (command) | target | AVX2 only | AMX-BF16 |" and rule == "|---|---|---|---|"
    date = log_date(Path(cell["log"]), LOGS[cell["log"]])
    assert line == f"| a figure (`cmd`) | ≤ 1 | {NOT_MEASURED} | **{figure}** · {date} · [log](../results/speed/{cell['log']}) |"


def test_a_log_without_the_figure_names_the_log_and_what_was_looked_for(tmp_path):
    root = project(tmp_path, [row("against_trl", {"avx2": {"log": "trl.txt", "select": "trl"}})])
    with pytest.raises(ValueError, match=r"results/speed/trl.txt: no line matches"):
        speed_table_lines(root)
    (root / SPEED / "decode.txt").write_text('# 2026-12-03\n{"bind": "0", "tok_s": 1.0}\n')
    (root / SPEED / "table.yaml").write_text(
        yaml.safe_dump({"kinds": {"avx2": "x"}, "rows": [row("decode", {"avx2": {"log": "decode.txt", "select": "0-1"}})]}, sort_keys=False)
    )
    with pytest.raises(ValueError, match="decode.txt: no decode line .* for bind '0-1'"):
        speed_table_lines(root)


def test_a_log_whose_header_names_no_date_is_refused(tmp_path):
    root = project(tmp_path, [row("arm_evaluation", {"amx": {"log": "arm.txt"}})])
    (root / SPEED / "arm.txt").write_text("arm evaluation, the base shared: 10.0 s\n# written 2026-12-05 below the figure counts too\n")
    assert speed_table_lines(root)[2].endswith("· 2026-12-05 · [log](results/speed/arm.txt) |")
    (root / SPEED / "arm.txt").write_text("arm evaluation, the base shared: 10.0 s, 2026-12-05 outside the header\n")
    with pytest.raises(ValueError, match="arm.txt: its header .* names no date"):
        speed_table_lines(root)


def test_an_unknown_reader_or_cpu_kind_is_refused_with_what_is_known(tmp_path):
    with pytest.raises(ValidationError, match=re.escape(f"unknown speed-table reader 'stopwatch'; known: {READERS.names()}")):
        load_table(project(tmp_path / "a", [row("stopwatch", {})]))
    with pytest.raises(ValidationError, match=r"CPU kinds \['avx512'\] are not among kinds \(avx2, amx\)"):
        load_table(project(tmp_path / "b", [row("make_run", {"avx512": {"log": "make_run.txt"}})]))


def test_the_committed_table_reads_every_cell_from_a_committed_log():
    table = load_table(ROOT)
    lines = speed_table_lines(ROOT)
    assert len(lines) == 2 + len(table.rows)
    for spec, line in zip(table.rows, lines[2:], strict=True):
        assert line.count("[log](") == len(spec.cells) and line.count(NOT_MEASURED) == len(table.kinds) - len(spec.cells), line
        for cell in spec.cells.values():
            assert (ROOT / SPEED / cell.log).is_file()
