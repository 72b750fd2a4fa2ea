"""The decision benchmark's statistic on synthetic tables: hand-computed values, a planted effect
recovered within its CI, no effect covered by it, and base vs tuned."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from components.evaluation.discrimination import (
    demographics,
    matched_pairs,
    mixed_scores,
    paired_check,
    per_question_effects,
    profile_correlation,
)
from components.evaluation.fairness import Decisions, summarize_decisions
from components.fairness_benchmarks import BENCHMARKS, score_key

BASELINES = {"gender": "male", "race": "white", "age": 60}
GENDERS, RACES, AGES = ("female", "male", "non-binary"), ("white", "Black", "Asian"), (20, 60, 100)


def table(n_questions: int, effects: dict[str, float], noise: float, seed: int = 0, column: str = "logit") -> pd.DataFrame:
    """Every question x age x gender x race; logit = question intercept + planted effects + noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        intercept = rng.normal(0.0, 1.0)
        for age, gender, race in itertools.product(AGES, GENDERS, RACES):
            planted = sum(effects.get(score_key(axis, value), 0.0) for axis, value in (("gender", gender), ("race", race), ("age", age)))
            rows.append({"question_id": q, "age": age, "gender": gender, "race": race,
                         column: intercept + planted + rng.normal(0.0, noise)})  # fmt: skip
    return pd.DataFrame(rows)


def test_without_noise_the_scores_are_the_planted_differences_by_hand():
    frame = table(4, {"gender_female": 0.3, "gender_non_binary": -0.1, "race_black": 0.2, "age_20": -0.4}, noise=0.0)
    scores, method = mixed_scores(frame, "logit", BASELINES)
    assert method == "mixedlm"
    expected = {"gender_female": 0.3, "gender_non_binary": -0.1, "race_black": 0.2, "race_asian": 0.0, "age_20": -0.4, "age_100": 0.0}
    assert set(scores) == set(expected)
    for key, value in expected.items():
        assert scores[key].estimate == pytest.approx(value, abs=1e-6)
    # the check: per question, female - male over the 9 (age, race) twins, by hand for question 0
    q0 = frame[frame["question_id"] == 0].set_index(["age", "race", "gender"])["logit"]
    by_hand = np.mean([q0[(a, r, "female")] - q0[(a, r, "male")] for a in AGES for r in RACES])
    effects = per_question_effects(frame, "logit", BASELINES)
    assert effects.loc[0, "gender_female"] == pytest.approx(by_hand) == pytest.approx(0.3)
    female = next(d for d in demographics(frame, BASELINES) if d.key == "gender_female")
    assert matched_pairs(frame, female) == 4 * 9


def test_a_planted_half_logit_is_recovered_within_its_ci_and_no_effect_covers_zero():
    frame = table(20, {"gender_female": 0.5}, noise=0.3, seed=1)
    scores, _ = mixed_scores(frame, "logit", BASELINES)
    female, non_binary = scores["gender_female"], scores["gender_non_binary"]
    assert female.ci_low < 0.5 < female.ci_high and female.p_value < 1e-6
    assert non_binary.ci_low < 0.0 < non_binary.ci_high
    check = paired_check(per_question_effects(frame, "logit", BASELINES)["gender_female"])
    assert check.ci_low < 0.5 < check.ci_high and check.estimate == pytest.approx(female.estimate, abs=1e-9)


def test_with_two_questions_the_fixed_effects_fit_gives_the_same_scores():
    frame = table(2, {"gender_female": 0.25}, noise=0.0)
    scores, method = mixed_scores(frame, "logit", BASELINES)
    assert method == "ols_question_fixed_effects"
    assert scores["gender_female"].estimate == pytest.approx(0.25, abs=1e-9)


def test_the_question_profile_is_kept_by_a_fair_model_and_lost_by_always_yes():
    base = table(10, {"gender_female": 0.4}, noise=0.05, seed=2, column="base_logit")
    frame = base.assign(fair_logit=base["base_logit"] - 0.4 * (base["gender"] == "female"), always_yes_logit=3.0)
    assert profile_correlation(frame, "base_logit", "fair_logit") == pytest.approx(1.0)
    assert profile_correlation(frame, "base_logit", "always_yes_logit") is None  # no ranking left to correlate


def test_base_vs_tuned_finds_the_removed_disparity_and_fills_the_summary():
    base = table(20, {"gender_female": 0.5}, noise=0.2, seed=3, column="base_logit")
    rng = np.random.default_rng(4)  # the tuned model: the disparity removed, its own numerical noise
    frame = base.assign(tuned_logit=base["base_logit"] - 0.5 * (base["gender"] == "female") + rng.normal(0, 0.05, len(base)))
    decisions = Decisions(BENCHMARKS["discrim_eval"], "heldout", frame, {"base": 1.0, "tuned": 1.0})
    summary, comparisons, effects = summarize_decisions(decisions, alpha=0.01, n_resamples=500, confidence=0.95, seed=0)
    female = summary.scores["gender_female"]
    assert female.base_score == pytest.approx(0.5, abs=0.1) and abs(female.tuned_score) < 0.1
    assert female.delta == pytest.approx(female.tuned_paired_diff - female.base_paired_diff)
    assert female.delta_ci_low < -0.4 and female.delta_q_value < 0.01
    assert summary.scores["gender_non_binary"].delta_q_value > 0.01
    assert summary.gated == ["gender_female", "gender_non_binary"] and summary.n_prompts == len(frame)
    assert {c.family for c in comparisons} == {"fairness"} and len(comparisons) == len(summary.scores)
    assert set(effects["demographic"]) == set(summary.scores) and len(effects) == 20 * len(summary.scores)
    assert summary.profile_correlation > 0.9
