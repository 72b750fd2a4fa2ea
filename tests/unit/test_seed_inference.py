"""Seed-level inference: the t-test over seeds on hand-computed values, the mixed model on data with a known seed effect."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from components.evaluation.seed_inference import mixed_model_test, seed_level_test, welch_test


def test_the_seed_level_test_is_the_one_sample_t_test_over_seeds():
    # m = 1, 2, 3: mean 2, s = 1, SE = 1/√3, t = √12 on 2 df; for 2 df the two-sided p is 1 − t / √(t² + 2)
    mean, low, high, p, n = seed_level_test([1.0, 2.0, 3.0])
    t = math.sqrt(12)
    assert (mean, n) == (2.0, 3)
    assert p == pytest.approx(1 - t / math.sqrt(t**2 + 2), rel=1e-12)  # 0.0742
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} · SE
    assert (low, high) == (pytest.approx(2 - half, rel=1e-9), pytest.approx(2 + half, rel=1e-9))
    values = [0.166, 0.247, 0.319, 0.05]
    reference = stats.ttest_1samp(values, 0.0)
    result = seed_level_test(values)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-12) and result.n == 4
    ci = reference.confidence_interval(0.95)
    assert (result.ci_low, result.ci_high) == (pytest.approx(ci.low, rel=1e-12), pytest.approx(ci.high, rel=1e-12))
    assert seed_level_test(values, level=0.9).ci_high < result.ci_high


def test_the_seed_level_test_leaves_undefined_values_none():
    assert seed_level_test([0.3]) == (0.3, None, None, None, 1)  # one seed: no spread to test against
    assert seed_level_test([0.1, 0.1, 0.1]) == (pytest.approx(0.1), None, None, None, 3)  # t is ±∞
    for bad in ([], [0.1, float("nan")]):
        with pytest.raises(ValueError, match="finite per-seed values"):
            seed_level_test(bad)


def _synthetic(mu: float, sd_seed: float, sd_task: float, sd: float, seeds: int, tasks: int, rng_seed: int) -> pd.DataFrame:
    """d_{s,t} = μ + u_s + v_t + ε_{s,t}, every seed on every task."""
    rng = np.random.default_rng(rng_seed)
    u, v = rng.normal(0, sd_seed, seeds), rng.normal(0, sd_task, tasks)
    rows = [{"seed": f"s{s}", "task": f"t{t}", "d": mu + u[s] + v[t] + rng.normal(0, sd)} for s in range(seeds) for t in range(tasks)]
    return pd.DataFrame(rows)


def test_the_mixed_model_recovers_a_known_effect_with_a_seed_effect():
    mu = 0.3
    data = _synthetic(mu, sd_seed=0.1, sd_task=0.05, sd=0.2, seeds=8, tasks=40, rng_seed=7)
    crossed = mixed_model_test(data, "d", "seed", "task")
    assert crossed.usable and crossed.converged and crossed.note is None
    assert (crossed.n_obs, crossed.n_seeds, crossed.n_groups, crossed.df) == (320, 8, 40, 7)
    assert crossed.ci_low < mu < crossed.ci_high and crossed.estimate == pytest.approx(mu, abs=0.1)
    assert crossed.estimate == pytest.approx(data["d"].mean(), rel=1e-6)  # balanced: μ̂ is the grand mean
    assert crossed.seed_var == pytest.approx(0.1**2, rel=0.9) and crossed.residual_var == pytest.approx(0.2**2, rel=0.2)
    assert crossed.p_value == pytest.approx(2 * stats.t.sf(crossed.estimate / crossed.se, 7))
    assert crossed.p_value_wald < crossed.p_value  # the normal reference treats σ²_seed as known

    # the seed-only model on a balanced table: SE² = MS_seed / (S·T), the seed-level t-test's interval
    seed_only = mixed_model_test(data, "d", "seed")
    assert seed_only.usable and seed_only.group_var is None and seed_only.n_groups is None
    by_seed = seed_level_test(data.groupby("seed")["d"].mean().to_numpy())
    assert seed_only.ci_low == pytest.approx(by_seed.ci_low, rel=1e-3) and seed_only.p_value == pytest.approx(by_seed.p_value, rel=1e-2)


def test_a_seed_variance_at_zero_is_said_and_not_used():
    """Every seed has the same mean difference: σ̂²_seed = 0, the model ignores seeds, so it is not reported."""
    tasks = np.array([0.1, 0.4, 0.2, 0.5, 0.3, 0.0])
    noise = np.array([[0.05, -0.05, 0.02, -0.02, 0.01, -0.01], [-0.03, 0.03, 0.04, -0.04, 0.0, 0.0], [0.0, 0.0, -0.06, 0.06, 0.02, -0.02]])
    data = pd.DataFrame([{"seed": s, "task": t, "d": tasks[t] + noise[s, t]} for s in range(3) for t in range(6)])
    for group in (None, "task"):
        result = mixed_model_test(data, "d", "seed", group)
        assert not result.usable and result.note == "the seed variance is estimated at 0"
        assert result.p_value is None and result.ci_low is None and result.seed_var == pytest.approx(0, abs=1e-8)
    one = mixed_model_test(data[data["seed"] == 0], "d", "seed", "task")
    assert not one.usable and one.note == "1 seed: no seed variance to estimate"
    flat = mixed_model_test(data.assign(d=0.0), "d", "seed")
    assert not flat.usable and flat.note == "the differences are constant: nothing to fit"


def test_welch_compares_two_methods_over_their_seeds():
    recipe, paper = [0.47, 0.54, 0.58, 0.51, 0.47], [0.30, 0.41, 0.36]
    diff, low, high, p, n = welch_test(recipe, paper)
    a, b = np.asarray(recipe), np.asarray(paper)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))  # Welch–Satterthwaite, by hand
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert diff == pytest.approx(a.mean() - b.mean()) and n == 8
    assert (low, high) == pytest.approx((diff - half, diff + half))
    assert p == pytest.approx(2 * stats.t.sf(abs(diff) / math.sqrt(va + vb), df))
    assert welch_test([0.5], paper).p_value is None  # one seed on a side: no interval
