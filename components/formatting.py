"""One way to write a number in every report, so that a p-value reads the same in a run's summary.md,
a study's report.md, the README, the gate's reasons and the runs export.

- `number(v, digits=3)`: fixed decimals (``0.216``); integers as they are; booleans yes/no.
- `signed(v, digits=3)`: with its sign (``+0.036``, ``-0.114``); `typographic` turns the
  hyphen-minus of prose into U+2212 (the README's results: ``typographic(signed(v))``).
- `significant(v, digits=4)`: significant digits, for values of any scale (a gate's measure and
  threshold: ``0.0123``, ``50``).
- `p_value(v)`: p- and q-values: two significant digits from 0.001 (``0.012``, ``0.34``), below it
  one decimal of scientific notation (``4.2e-05``).
- `percent(share, digits=0, signed=False)`: a share as percent, a space before the sign (``47 %``, ``+7.4 %``).
- `interval(low, high, show=signed)`: ``[+0.012, +0.060]``; `estimate(mean, low, high)` puts the
  point estimate before it.
- `span(values, show=number)`: the range of several values, ``17–22`` (one value when both ends
  read the same).
- `duration(seconds)`: a wall-clock time as people say it (``48.2 s``, ``7 min 38 s``, ``1 h 04 min``).
- `change(base, tuned)`: the signed change and its percent of the base, the percent only where the
  base is not near zero at the precision shown (``-0.000 → -0.002`` is not "+755 %").

A missing value (None or NaN) is written ``n/a`` by every function.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

MISSING = "n/a"


def is_missing(value: object) -> bool:
    """None, or a float NaN (pandas' missing cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def number(value: object, digits: int = 3) -> str:
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{float(value):.{digits}f}"


def signed(value: float | None, digits: int = 3) -> str:
    return MISSING if is_missing(value) else f"{float(value):+.{digits}f}"


def significant(value: float | None, digits: int = 4) -> str:
    return MISSING if is_missing(value) else f"{float(value):.{digits}g}"


def p_value(value: float | None) -> str:
    if is_missing(value):
        return MISSING
    value = float(value)
    return f"{value:.1e}" if 0 < value < 1e-3 else f"{value:.2g}"


def percent(share: float | None, digits: int | None = 0, signed: bool = False) -> str:
    """`digits` None: as many as the value needs (a threshold: ``5 %``, ``2.5 %``)."""
    if is_missing(share):
        return MISSING
    spec = f"{'+' if signed else ''}{'g' if digits is None else f'.{digits}f'}"
    return f"{100 * float(share):{spec}} %"


def interval(low: float | None, high: float | None, show: Callable[[float | None], str] = signed) -> str:
    return MISSING if is_missing(low) or is_missing(high) else f"[{show(low)}, {show(high)}]"


def estimate(value: float | None, low: float | None, high: float | None, show: Callable[[float | None], str] = signed) -> str:
    """The point estimate and its interval: ``+0.036 [+0.012, +0.060]``; ``+0.036 [n/a, n/a]`` without one."""
    return f"{show(value)} [{show(low)}, {show(high)}]"


def change(base: float | None, tuned: float | None, digits: int = 3) -> str:
    if is_missing(base) or is_missing(tuned):
        return MISSING
    difference = f"{tuned - base:+.{digits}f}"
    near_zero = abs(base) < 10 ** (1 - digits)
    return difference if near_zero else f"{difference} ({percent((tuned - base) / base, 1, signed=True)})"


def span(values, show: Callable[[float | None], str] = number) -> str:
    low, high = show(min(values)), show(max(values))
    return low if low == high else f"{low}–{high}"


def duration(seconds: float) -> str:
    """A wall-clock time: tenths of a second below a minute, whole seconds below an hour, minutes above."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        whole = round(seconds)
        return f"{whole // 60} min {whole % 60} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"


def typographic(text: str) -> str:
    """Prose minus signs: every hyphen-minus before a digit becomes U+2212 (−0.114)."""
    return "".join(
        "−" if c == "-" and i + 1 < len(text) and (text[i + 1].isdigit() or text[i + 1] == ".") else c for i, c in enumerate(text)
    )
