"""The one number format of every report (`components.formatting`)."""

import math
import re
from pathlib import Path

import numpy as np
import pytest

from components.formatting import (
    MISSING,
    change,
    duration,
    estimate,
    interval,
    is_missing,
    number,
    p_value,
    percent,
    signed,
    significant,
    typographic,
)


@pytest.mark.parametrize("value", [None, math.nan, np.nan, np.float64("nan")])
def test_every_function_writes_a_missing_value_as_n_a(value):
    assert is_missing(value)
    for write in (number, signed, p_value, percent, significant):
        assert write(value) == MISSING
    assert interval(value, 0.1) == interval(0.1, value) == MISSING
    assert change(value, 0.1) == change(0.1, value) == MISSING


def test_numbers_integers_and_booleans():
    assert number(0.21649) == "0.216"
    assert number(0.21649, 1) == "0.2"
    assert number(104) == number(np.int64(104)) == "104"
    assert number(104.0) == "104.000"
    assert number(True) == "yes" and number(False) == "no"
    assert signed(0.036) == "+0.036" and signed(-0.1144) == "-0.114" and signed(0.5, 1) == "+0.5"
    assert significant(0.012345) == "0.01235" and significant(50.0) == "50"


@pytest.mark.parametrize(
    ("p", "shown"),
    [(0.5, "0.5"), (0.0123, "0.012"), (0.001, "0.001"), (0.00042, "4.2e-04"), (3.1e-12, "3.1e-12"), (1.0, "1"), (0.0, "0")],
)
def test_p_values_have_two_significant_digits_and_scientific_below_a_thousandth(p, shown):
    assert p_value(p) == shown


def test_percent_interval_and_estimate():
    assert percent(0.4712) == "47 %"
    assert percent(0.074, 1) == "7.4 %"
    assert percent(0.05, None) == "5 %" and percent(0.025, None) == "2.5 %"
    assert percent(-0.47, signed=True) == "-47 %" and percent(0.13, signed=True) == "+13 %"
    assert interval(0.012, 0.06) == "[+0.012, +0.060]"
    assert interval(0.012, 0.06, number) == "[0.012, 0.060]"
    assert estimate(0.47, 0.3, 0.6, percent) == "47 % [30 %, 60 %]"
    assert estimate(0.178, None, None) == "+0.178 [n/a, n/a]"  # one seed: no interval yet


def test_change_gives_a_percent_of_the_base_only_where_the_base_is_not_near_zero():
    assert change(0.216, 0.114) == "-0.102 (-47.2 %)"
    assert change(-0.0001, -0.002) == "-0.002"  # not "+1900.0 %" of a base that reads -0.000
    assert change(0.191, 0.207) == "+0.016 (+8.4 %)"
    assert change(0.01, 0.02) == "+0.010 (+100.0 %)"
    assert change(0.009, 0.02, digits=3) == "+0.011"


def test_typographic_minus_only_before_numbers():
    assert typographic("gap -0.114, -47 %, female-male, a - b") == "gap −0.114, −47 %, female-male, a - b"


ROOT = Path(__file__).resolve().parents[2]
WRITERS = [  # every module that writes numbers into a report, a README line, a gate reason or the runs export
    *sorted((ROOT / "components" / "study").glob("*.py")),
    *sorted((ROOT / "components" / "reporting").glob("*.py")),
    *sorted((ROOT / "components" / "release").glob("*.py")),
    ROOT / "components" / "tracking" / "export.py",
]
FIXED_DECIMALS = re.compile(r"\{[^{}:!]+:\+?\.\d[f%]\}")  # {x:.3f}, {x:+.2f}, {x:.0%}: a number written by hand
PRIVATE_FORMATTER = re.compile(r"^def _(fmt|fmt_p|num|number|p|pct|percent|signed|interval|range|share|minus)\(", re.M)


@pytest.mark.parametrize("path", WRITERS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_report_writers_leave_numbers_to_the_formatting_module(path):
    text = path.read_text()
    assert not FIXED_DECIMALS.findall(text), f"write these with components.formatting: {FIXED_DECIMALS.findall(text)}"
    assert not PRIVATE_FORMATTER.findall(text), "a private number formatter: use components.formatting"


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (29.64, "29.6 s"),
        (59.94, "59.9 s"),
        (458.4, "7 min 38 s"),
        (599.6, "10 min 0 s"),
        (3599.4, "59 min 59 s"),
        (3840, "1 h 04 min"),
        (7436, "2 h 04 min"),
    ],
)
def test_a_duration_is_written_as_people_say_it_and_never_as_60_seconds(seconds, written):
    assert duration(seconds) == written
