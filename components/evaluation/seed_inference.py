"""Seed-level inference for a training method: the training seed, not the task, is the unit of replication.

An arm trained with S seeds and evaluated on T shared tasks gives the paired differences d_{s,t}
(tuned − base on task t for seed s, or arm A − arm B of the same seed index). The T tasks of one seed
share its training run, so they are not T independent replicates of the method; a new replicate of
the method is a new seed.

`seed_level_test`: the per-seed means m_s = (1/T) Σ_t d_{s,t} are the n = S observations,

    m̄ = (1/n) Σ_s m_s,   SE = s_m / √n,   t = m̄ / SE,   df = n − 1,
    CI = m̄ ± t_{(1+c)/2, n−1} · SE,   p = 2 · P(T_{n−1} > |t|)

(the one-sample Student t-test, `scipy.stats.ttest_1samp`). With n < 2, or when the m_s do not
vary (t is 0/0 or ±∞), the interval and p are None.

`mixed_model_test`: the linear mixed model of the differences with the seed random,

    d_{s,t} = μ + u_s + ε_{s,t},               u_s ~ N(0, σ²_seed),  ε_{s,t} ~ N(0, σ²)
    d_{s,t} = μ + u_s + v_t + ε_{s,t},         v_t ~ N(0, σ²_task)  (with `group_col`: task crossed)

fitted by REML (statsmodels `MixedLM`; the crossed model as two variance components of one group,
Nelder–Mead on the response divided by its sd, rescaled after). μ̂ and SE(μ̂) are the model's; the
interval and p refer t = μ̂ / SE to Student t with S − 1 df, the containment degrees of freedom of an
intercept whose random effect is the seed (Littell et al. 2006, SAS for Mixed Models, 2nd ed.,
DDFM=CONTAIN), because a normal reference (statsmodels' Wald z, kept as `p_value_wald`) treats σ²_seed
estimated from S seeds as known. On a balanced table the seed-only model gives μ̂ = m̄ and
SE² = MS_seed / (S·T) = s_m² / S, the seed-level test's interval; the crossed model adds σ²_task / T
(Searle, Casella & McCulloch 1992, Variance Components, ch. 4). `usable` is False, and `note` says
why, when the fit raises, does not converge, leaves SE undefined, or estimates σ²_seed at zero (the
boundary: the model then treats the S·T differences as independent of their seed, which is the
assumption under test); the seed-level t-test is then the only seed-level inference.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

# σ̂²_seed at most this fraction of var(d) is the optimiser's boundary value, i.e. zero
ZERO_VARIANCE_RTOL = 1e-6
MAX_ITERATIONS = 5000


class SeedLevelTest(NamedTuple):
    """`seed_level_test`: m̄, its CI, the t-test's p and n seeds (None where undefined)."""

    mean: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n: int


@dataclass(frozen=True)
class MixedModelTest:
    """`mixed_model_test`: μ̂, its CI and p on t with `df` = S − 1, and the variance components."""

    estimate: float | None
    se: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None  # Student t, df = n_seeds − 1
    p_value_wald: float | None  # statsmodels' normal reference
    df: int
    seed_var: float | None
    group_var: float | None  # σ²_task; None without group_col
    residual_var: float | None
    n_obs: int
    n_seeds: int
    n_groups: int | None
    converged: bool
    usable: bool
    note: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def seed_level_test(per_seed_values: Sequence[float], level: float = 0.95) -> SeedLevelTest:
    """One-sample t-test of the per-seed effects m_s against 0 (module docstring). Raises ValueError
    when there are no values or one is not finite."""
    m = np.asarray(per_seed_values, dtype=float)
    if m.size == 0 or not np.isfinite(m).all():
        raise ValueError(f"seed-level test needs finite per-seed values, got {list(per_seed_values)}")
    n, mean = int(m.size), float(m.mean())
    if n < 2 or np.ptp(m) <= 1e-12 * max(1.0, float(np.abs(m).max())):
        return SeedLevelTest(mean, None, None, None, n)
    se = float(m.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return SeedLevelTest(mean, mean - half, mean + half, _finite(stats.ttest_1samp(m, 0.0).pvalue), n)


def welch_test(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> SeedLevelTest:
    """Two methods' per-seed values compared over seeds: mean(a) − mean(b) with Welch's t-interval and
    p (unequal variances, Welch–Satterthwaite df; `scipy.stats.ttest_ind(equal_var=False)`); n = seeds
    of both. None where a side has < 2 seeds or neither side varies."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size == 0 or y.size == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"Welch test needs finite per-seed values on both sides, got {list(a)} and {list(b)}")
    n, diff = int(x.size + y.size), float(x.mean() - y.mean())
    if x.size < 2 or y.size < 2 or (np.ptp(x) <= 0 and np.ptp(y) <= 0):
        return SeedLevelTest(diff, None, None, None, n)
    result = stats.ttest_ind(x, y, equal_var=False)
    interval = result.confidence_interval(level)
    return SeedLevelTest(diff, _finite(interval.low), _finite(interval.high), _finite(result.pvalue), n)


def _unusable(n_obs: int, n_seeds: int, n_groups: int | None, note: str, **fit) -> MixedModelTest:
    empty = dict(estimate=None, se=None, seed_var=None, group_var=None, residual_var=None, converged=False)
    return MixedModelTest(**{**empty, **fit}, ci_low=None, ci_high=None, p_value=None, p_value_wald=None,
                          df=max(n_seeds - 1, 0), n_obs=n_obs, n_seeds=n_seeds, n_groups=n_groups,
                          usable=False, note=note)  # fmt: skip


def mixed_model_test(df: pd.DataFrame, value_col: str, seed_col: str, group_col: str | None = None, level: float = 0.95) -> MixedModelTest:
    """REML fit of d ~ 1 with the seed random (and `group_col`, the task, crossed), module docstring."""
    from statsmodels.regression.mixed_linear_model import MixedLM

    data = pd.DataFrame({"y": df[value_col].astype(float).to_numpy(), "seed": df[seed_col].astype(str).to_numpy()})
    if group_col is not None:
        data["task"] = df[group_col].astype(str).to_numpy()
    data = data[np.isfinite(data["y"])]
    n_obs, n_seeds = len(data), int(data["seed"].nunique())
    n_groups = int(data["task"].nunique()) if group_col is not None else None
    if n_seeds < 2:
        return _unusable(n_obs, n_seeds, n_groups, f"{n_seeds} seed: no seed variance to estimate")
    scale = float(data["y"].std(ddof=1))
    if not scale > 0:
        return _unusable(n_obs, n_seeds, n_groups, "the differences are constant: nothing to fit")
    data["y"] = data["y"] / scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter: judged below from `converged` and σ̂²_seed
        try:
            if group_col is None:
                model = MixedLM.from_formula("y ~ 1", groups="seed", data=data)
            else:
                vc = {"seed": "0 + C(seed)", "task": "0 + C(task)"}
                model = MixedLM.from_formula("y ~ 1", groups=np.zeros(n_obs), re_formula="0", vc_formula=vc, data=data)
            result = model.fit(reml=True, method=["nm"], maxiter=MAX_ITERATIONS)
        except (ValueError, np.linalg.LinAlgError) as error:
            return _unusable(n_obs, n_seeds, n_groups, f"the fit failed ({error})")
    if group_col is None:
        seed_var, group_var = float(result.cov_re.iloc[0, 0]), None
    else:
        names = list(model.exog_vc.names)
        seed_var, group_var = float(result.vcomp[names.index("seed")]), float(result.vcomp[names.index("task")]) * scale**2
    fit = dict(estimate=_finite(result.fe_params.iloc[0] * scale), se=_finite(result.bse_fe.iloc[0] * scale),
               seed_var=seed_var * scale**2, group_var=group_var, residual_var=float(result.scale) * scale**2,
               converged=bool(result.converged))  # fmt: skip
    if not fit["converged"]:
        return _unusable(n_obs, n_seeds, n_groups, "the fit did not converge", **fit)
    if seed_var <= ZERO_VARIANCE_RTOL:
        return _unusable(n_obs, n_seeds, n_groups, "the seed variance is estimated at 0", **fit)
    if fit["estimate"] is None or not fit["se"]:
        return _unusable(n_obs, n_seeds, n_groups, "the standard error of the estimate is undefined", **fit)
    t, dof = fit["estimate"] / fit["se"], n_seeds - 1
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * fit["se"]
    return MixedModelTest(**fit, ci_low=fit["estimate"] - half, ci_high=fit["estimate"] + half,
                          p_value=float(2 * stats.t.sf(abs(t), dof)), p_value_wald=float(2 * stats.norm.sf(abs(t))),
                          df=dof, n_obs=n_obs, n_seeds=n_seeds, n_groups=n_groups, usable=True)  # fmt: skip
