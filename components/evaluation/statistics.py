"""Paired significance tests of base vs tuned per-group values (e.g. entropy gaps).

With d_i = base_i − tuned_i over the n groups:

    t = d̄ / (s_d / √n),  s_d the sample standard deviation of d (n − 1 degrees of freedom)

two-sided p-value from Student's t (`scipy.stats.ttest_rel`), plus the Wilcoxon signed-rank test
(`scipy.stats.wilcoxon`), which does not assume normally distributed differences. A positive t
means the tuned values are lower (for entropy gaps: the tuned model is more consistent).

Degenerate inputs never leak NaN or ±inf: the statistic is None and `notes` says why
(n < 2; differences with zero variance, where t is 0/0 or ±∞; all differences zero).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

# Differences whose spread is below this fraction of their magnitude count as constant: the
# t statistic of such data is floating-point noise over a near-zero standard deviation.
_ZERO_SPREAD_RTOL = 1e-12


@dataclass(frozen=True)
class PairedTest:
    """Result of `paired_test`; None marks a value that is undefined for these data (see notes)."""

    n: int
    mean_base: float | None
    mean_tuned: float | None
    mean_diff: float | None  # mean of base − tuned
    t_statistic: float | None
    p_value: float | None
    p_value_wilcoxon: float | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _finite_or_none(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def paired_test(base: Sequence[float], tuned: Sequence[float]) -> PairedTest:
    """Paired t-test and Wilcoxon signed-rank test of `base` vs `tuned` (same groups, same order).

    Raises ValueError when the lengths differ or a value is not finite.
    """
    if len(base) != len(tuned):
        raise ValueError(
            f"paired test needs equal lengths, got {len(base)} base vs {len(tuned)} tuned"
        )
    b = np.asarray(base, dtype=float)
    t = np.asarray(tuned, dtype=float)
    if not (np.isfinite(b).all() and np.isfinite(t).all()):
        raise ValueError("paired test inputs must be finite (found NaN or inf)")
    n = len(b)
    if n == 0:
        return PairedTest(0, None, None, None, None, None, None, ["no pairs: nothing to test"])

    diff = b - t
    notes: list[str] = []
    t_statistic = p_value = p_wilcoxon = None
    all_zero = bool(np.all(diff == 0))
    spread = float(np.ptp(diff))
    constant = spread <= _ZERO_SPREAD_RTOL * max(1.0, float(np.max(np.abs(diff))))

    if n < 2:
        notes.append(f"n={n} < 2: paired t-test and Wilcoxon test are undefined")
    else:
        if constant:
            notes.append(
                "differences base - tuned have zero variance: t statistic is undefined "
                "(0/0 or infinite), p_value is null"
            )
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                result = stats.ttest_rel(b, t)
            t_statistic = _finite_or_none(result.statistic)
            p_value = _finite_or_none(result.pvalue)
            if p_value is None:
                notes.append("paired t-test returned a non-finite value: p_value is null")
        if all_zero:
            notes.append("all differences are zero: Wilcoxon test is undefined")
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                p_wilcoxon = _finite_or_none(stats.wilcoxon(b, t).pvalue)
            if p_wilcoxon is None:
                notes.append("Wilcoxon test returned a non-finite value: p_value_wilcoxon is null")

    return PairedTest(
        n=n,
        mean_base=float(b.mean()),
        mean_tuned=float(t.mean()),
        mean_diff=float(diff.mean()),
        t_statistic=t_statistic,
        p_value=p_value,
        p_value_wilcoxon=p_wilcoxon,
        notes=notes,
    )
