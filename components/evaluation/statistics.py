"""Paired significance tests of base vs tuned per-group values (e.g. entropy gaps).

With d_i = base_i − tuned_i over the n groups:

    t = d̄ / (s_d / √n),  s_d the sample standard deviation of d (n − 1 degrees of freedom)

two-sided p-value from Student's t (`scipy.stats.ttest_rel`), plus the Wilcoxon signed-rank test
(`scipy.stats.wilcoxon`), which does not assume normally distributed differences. A positive t
means the tuned values are lower (for entropy gaps: the tuned model is more consistent).

Degenerate inputs never leak NaN or ±inf: the statistic is None and `notes` says why
(n < 2; differences with zero variance, where t is 0/0 or ±∞; all differences zero).

`compare` adds a paired bootstrap confidence interval of the mean difference, and `adjust` the
Benjamini–Hochberg correction across all metrics compared in one family (base vs tuned; variant
A vs variant B).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

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
        raise ValueError(f"paired test needs equal lengths, got {len(base)} base vs {len(tuned)} tuned")
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
            notes.append("differences base - tuned have zero variance: t statistic is undefined (0/0 or infinite), p_value is null")
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


# --- paired bootstrap intervals and Benjamini–Hochberg across metrics ------------------------------


def bootstrap_ci(a: Sequence[float], b: Sequence[float], n_resamples: int, confidence: float, seed: int) -> tuple[float, float] | None:
    """Paired percentile bootstrap interval of the mean difference d̄ = mean(b_i − a_i).

    Resamples the n pairs with replacement (`scipy.stats.bootstrap`, paired=True, seeded), takes
    the (1−c)/2 and (1+c)/2 quantiles of the resampled d̄ (Efron & Tibshirani 1993). None for
    n < 2. Constant differences give the degenerate interval [d, d].
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) != len(y):
        raise ValueError(f"bootstrap needs paired samples, got {len(x)} vs {len(y)}")
    if len(x) < 2:
        return None
    diff = y - x
    if np.ptp(diff) == 0:
        return float(diff[0]), float(diff[0])
    result = stats.bootstrap(
        (x, y),
        lambda u, v, axis=-1: np.mean(v - u, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """BH-adjusted p-values (q-values): q_(i) = min_{j >= i} p_(j) · m / j over the m defined p-values.

    `scipy.stats.false_discovery_control(method="bh")` (Benjamini & Hochberg 1995); None stays None
    and does not count in m. Rejecting q <= α controls the false discovery rate at α.
    """
    defined = [i for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    if defined:
        adjusted = stats.false_discovery_control([p_values[i] for i in defined], method="bh")
        for i, q in zip(defined, adjusted):
            out[i] = float(q)
    return out


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of one metric between condition a (e.g. base) and b (e.g. tuned)."""

    family: str  # "base_vs_tuned" | "variants"
    metric: str
    model: str  # for variant comparisons: the model whose samples are compared; else ""
    a: str
    b: str
    n: int
    mean_a: float | None
    mean_b: float | None
    delta: float | None  # mean(b − a)
    ci_low: float | None
    ci_high: float | None
    p_t: float | None
    p_wilcoxon: float | None
    q_bh: float | None = None
    significant: bool = False  # q_bh < alpha

    def to_dict(self) -> dict:
        return asdict(self)


def compare(
    family: str, metric: str, a: Sequence[float], b: Sequence[float], *, labels: tuple[str, str],
    model: str = "", n_resamples: int, confidence: float, seed: int,
) -> Comparison:  # fmt: skip
    """Paired t-test, Wilcoxon signed-rank test and bootstrap CI of b − a (q_bh left for `adjust`)."""
    test = paired_test(a, b)
    ci = bootstrap_ci(a, b, n_resamples, confidence, seed)
    return Comparison(
        family=family, metric=metric, model=model, a=labels[0], b=labels[1], n=test.n,
        mean_a=test.mean_base, mean_b=test.mean_tuned,
        delta=None if test.mean_diff is None else -test.mean_diff,
        ci_low=None if ci is None else ci[0], ci_high=None if ci is None else ci[1],
        p_t=test.p_value, p_wilcoxon=test.p_value_wilcoxon,
    )  # fmt: skip


def adjust(comparisons: list[Comparison], alpha: float) -> list[Comparison]:
    """Benjamini–Hochberg over the t-test p-values of one family; significant = q_bh < alpha."""
    q_values = benjamini_hochberg([c.p_t for c in comparisons])
    return [replace(c, q_bh=q, significant=q is not None and q < alpha) for c, q in zip(comparisons, q_values)]


# --- power: the smallest change a design can see, and a one-sample test of a bias ----------------


def paired_power(effect: float, sd_diff: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test at level α to detect a true mean difference `effect`.

    T ~ noncentral t(df = n − 1, nc = effect·√n / sd_diff); power = P(T > t₁₋α/₂) + P(T < −t₁₋α/₂)
    (Cohen 1988, ch. 2; the same as statsmodels' TTestPower).
    """
    if n < 2 or sd_diff <= 0:
        raise ValueError(f"power needs n >= 2 and sd_diff > 0, got n={n}, sd_diff={sd_diff}")
    df, nc = n - 1, effect * math.sqrt(n) / sd_diff
    critical = stats.t.ppf(1 - alpha / 2, df)
    power = float(stats.nct.sf(critical, df, nc) + stats.nct.cdf(-critical, df, nc))
    if math.isfinite(power):
        return power
    # scipy's nct fails (NaN) for some tiny df / large nc: the normal approximation there
    return float(stats.norm.sf(critical - nc) + stats.norm.cdf(-critical - nc))


def detectable_effect(sd_diff: float, n: int, alpha: float, power: float = 0.8) -> float | None:
    """Minimum detectable mean difference δ of a paired t-test: `paired_power`(δ) = power.

    Solved with `scipy.optimize.brentq` between 0 and 4× the normal approximation
    (t₁₋α/₂ + t_power)·sd_diff/√n; None when n < 2 or sd_diff is 0 (no spread to size a design from).
    """
    from scipy.optimize import brentq

    if n < 2 or not sd_diff > 0:
        return None
    df = n - 1
    guess = (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * sd_diff / math.sqrt(n)
    return float(brentq(lambda d: paired_power(d, sd_diff, n, alpha) - power, 0.0, 4 * guess, xtol=1e-12))


def one_sample_test(values: Sequence[float]) -> tuple[float | None, float | None]:
    """(mean, two-sided one-sample t-test p-value of mean = 0), e.g. of signed woman − man
    differences across groups; p is None for n < 2 or values without spread."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return None, None
    mean = float(x.mean())
    if len(x) < 2 or np.ptp(x) <= _ZERO_SPREAD_RTOL * max(1.0, float(np.max(np.abs(x)))):
        return mean, None
    return mean, _finite_or_none(stats.ttest_1samp(x, 0.0).pvalue)
