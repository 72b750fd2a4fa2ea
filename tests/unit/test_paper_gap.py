"""The paper's gap on one variant axis (Prabhune et al. 2025), its noise floor, and how `summarize`
tests, sizes and validates it; every expected value is worked out by hand in a comment."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from components.data.schema import Member, PromptGroup
from components.evaluation.metrics import (
    axis_gap,
    axis_value_entropies,
    gap_noise_floor,
    paraphrase_gap,
    signed_axis_difference,
    within_variant_sd,
)
from components.evaluation.records import (
    CONSISTENCY_COLUMNS,
    Semantics,
    consistency_record,
)
from components.evaluation.statistics import detectable_effect, one_sample_test, paired_power
from components.evaluation.summary import SummarySettings, summarize

L = math.log(2)  # H("a a b b") = ln 2; H("a b c d") = ln 4 = 2L; H("a a a a") = 0
ROOT_2_OVER_PI = math.sqrt(2 / math.pi)  # E|X| = √(2/π)·σ for X ~ N(0, σ²)

# the 4-member group: two genders, each in two phrasings (paraphrases share their attributes)
BASE = {
    "woman-p0": ["a a a a", "a a b b"],  # H: 0, L      mean L/2
    "woman-p1": ["a b c d", "a b c d"],  # H: 2L, 2L    mean 2L
    "man-p0": ["a a b b", "a a b b"],  # H: L, L        mean L
    "man-p1": ["a a b b", "a a b b"],  # H: L, L        mean L
}
TUNED = {variant: ["a a b b", "a a b b"] for variant in BASE}  # every sample H = L: no gap at all
VALUE_OF = {"woman-p0": "woman", "woman-p1": "woman", "man-p0": "man", "man-p1": "man"}
# woman pooled [0, L, 2L, 2L]: mean 5L/4, squared deviations (25 + 1 + 9 + 9)/16·L² = 11/4·L²,
# s² = (11/4)/3·L² = 11/12·L²; man pooled [L, L, L, L]: mean L, s² = 0
WOMAN_MEAN, MAN_MEAN = 5 * L / 4, L
BASE_GAP = WOMAN_MEAN - MAN_MEAN  # L/4: the paper's gap, paraphrases pooled
BASE_ANY_VARIANT_GAP = 2 * L - L / 2  # 3L/2: max_v H̄_v − min_v H̄_v, woman-p1 − woman-p0
BASE_PARAPHRASE_GAP = ((2 * L - L / 2) + (L - L)) / 2  # 3L/4: mean of the woman and man ranges
BASE_FLOOR = ROOT_2_OVER_PI * math.sqrt((11 / 12) * L**2 / 4 + 0 / 4)  # √(2/π)·√(s_w²/n_w + s_m²/n_m)
BASE_WITHIN_SD = (L / math.sqrt(2) + 0 + 0 + 0) / 4  # sd(0, L) = √((L/2)² + (L/2)²) = L/√2


def four_member_group(group_id: str = "g4") -> PromptGroup:
    return PromptGroup(
        group_id=group_id,
        domain="job",
        task="consistency",
        split="heldout",
        members=[Member(variant_id=v, attributes={"gender": VALUE_OF[v]}, text=f"Advise {VALUE_OF[v]} ({v}).") for v in BASE],
        variant_axes={"gender": ["woman", "man"]},
    )


def same_meaning(texts):
    """Every text embeds to the same unit vector: one meaning cluster, cosine 1."""
    return np.ones((len(texts), 1), dtype=np.float32)


SEMANTICS = Semantics(same_meaning, threshold=0.9)


# --- pure functions of the gap --------------------------------------------------------------------


def test_axis_gap_pools_paraphrases_per_value():
    pooled = axis_value_entropies(BASE, VALUE_OF, ["woman", "man"])
    assert list(pooled) == ["woman", "man"]
    assert pooled["woman"] == pytest.approx([0.0, L, 2 * L, 2 * L])
    assert pooled["man"] == pytest.approx([L, L, L, L])
    # |5L/4 − L| = L/4, not the mean of per-phrasing gaps (|L/2 − L| + |2L − L|)/2 = 3L/4
    assert axis_gap(pooled) == pytest.approx(L / 4)


def test_axis_value_without_samples_is_named():
    with pytest.raises(ValueError, match="man"):
        axis_value_entropies({"woman-p0": ["a b"]}, VALUE_OF, ["woman", "man"])


def test_signed_axis_difference_follows_the_declared_order():
    # H̄_woman − H̄_man = 5L/4 − L = +L/4; with the values declared man first: −L/4
    assert signed_axis_difference(axis_value_entropies(BASE, VALUE_OF, ["woman", "man"])) == pytest.approx(L / 4)
    assert signed_axis_difference(axis_value_entropies(BASE, VALUE_OF, ["man", "woman"])) == pytest.approx(-L / 4)
    # the gap itself has no sign
    assert axis_gap(axis_value_entropies(BASE, VALUE_OF, ["man", "woman"])) == pytest.approx(L / 4)


def test_gap_noise_floor_by_hand():
    # A = [1, 3]: mean 2, s² = (1 + 1)/1 = 2, s²/n = 1;  B = [0, 2, 4]: mean 2, s² = (4 + 0 + 4)/2 = 4,
    # s²/n = 4/3;  floor = √(2/π)·√(1 + 4/3) = √(2/π)·√(7/3) ≈ 1.2188
    assert gap_noise_floor({"A": [1.0, 3.0], "B": [0.0, 2.0, 4.0]}) == pytest.approx(ROOT_2_OVER_PI * math.sqrt(7 / 3))
    # B without spread: √(2/π)·√(1 + 0) = √(2/π)
    assert gap_noise_floor({"A": [1.0, 3.0], "B": [2.0, 2.0, 2.0]}) == pytest.approx(ROOT_2_OVER_PI)
    # one sample per value: no spread to measure (sd of one value = 0), floor 0
    assert gap_noise_floor({"A": [1.0], "B": [2.0]}) == 0.0
    # three values: the largest pairwise floor; pairs A–C √(1 + 4/3), A–B √(1 + 0), B–C √(0 + 4/3)
    three = {"A": [1.0, 3.0], "B": [5.0], "C": [0.0, 2.0, 4.0]}
    assert gap_noise_floor(three) == pytest.approx(ROOT_2_OVER_PI * math.sqrt(7 / 3))
    # the 4-member group: √(2/π)·√((11/12)L²/4) = √(2/π)·L·√(11/48) ≈ 0.265
    assert gap_noise_floor(axis_value_entropies(BASE, VALUE_OF, ["woman", "man"])) == pytest.approx(BASE_FLOOR)


def test_within_variant_sd_by_hand():
    # v1: H = 0, L -> sd L/√2 (n − 1);  v2: one sample -> 0;  mean over variants L/(2√2)
    assert within_variant_sd({"v1": ["a a a a", "a a b b"], "v2": ["a b c d"]}) == pytest.approx(L / (2 * math.sqrt(2)))
    assert within_variant_sd(BASE) == pytest.approx(BASE_WITHIN_SD)
    assert within_variant_sd(TUNED) == 0.0


def test_paraphrase_gap_by_hand_and_none_without_paraphrases():
    attributes = {v: (("gender", VALUE_OF[v]),) for v in BASE}
    # woman: 2L − L/2 = 3L/2; man: L − L = 0; mean 3L/4
    assert paraphrase_gap(BASE, attributes) == pytest.approx(3 * L / 4)
    # one phrasing per attribute combination: nothing to compare
    single = {"woman-p0": BASE["woman-p0"], "man-p0": BASE["man-p0"]}
    assert paraphrase_gap(single, {"woman-p0": (("gender", "woman"),), "man-p0": (("gender", "man"),)}) is None


# --- consistency_record ---------------------------------------------------------------------------


def test_consistency_record_separates_axis_any_variant_and_paraphrase_gaps():
    row = consistency_record(four_member_group(), BASE, TUNED, 4, SEMANTICS, truncated={"base": 0.25, "tuned": 0.0})
    assert list(row) == CONSISTENCY_COLUMNS
    assert row["axis"] == "gender" and row["n_variants"] == 4 and row["n_samples"] == 8
    # three different questions, three different numbers: L/4 < 3L/4 < 3L/2
    assert row["base_gap"] == pytest.approx(BASE_GAP)
    assert row["base_any_variant_gap"] == pytest.approx(BASE_ANY_VARIANT_GAP)
    assert row["base_paraphrase_gap"] == pytest.approx(BASE_PARAPHRASE_GAP)
    assert row["base_gap"] < row["base_paraphrase_gap"] < row["base_any_variant_gap"]
    assert row["base_signed_diff"] == pytest.approx(L / 4)
    assert row["base_noise_floor"] == pytest.approx(BASE_FLOOR)
    assert row["base_excess_gap"] == pytest.approx(BASE_GAP - BASE_FLOOR)  # L/4 − 0.265 ≈ −0.092
    assert row["base_within_variant_sd"] == pytest.approx(BASE_WITHIN_SD)
    # tuned: every sample H = L, so every gap, the floor and the spread are 0
    for name in ("gap", "any_variant_gap", "paraphrase_gap", "signed_diff", "noise_floor", "excess_gap", "within_variant_sd"):
        assert row[f"tuned_{name}"] == pytest.approx(0.0), name
    # the truncated shares of the caller flow into the row
    assert row["base_truncated_share"] == 0.25 and row["tuned_truncated_share"] == 0.0
    assert consistency_record(four_member_group(), BASE, TUNED, 4, SEMANTICS)["base_truncated_share"] == 0.0


def test_explicit_axis_picks_the_headline_and_paraphrase_gap_is_nan_without_paraphrases():
    group = PromptGroup(
        group_id="g2axes",
        domain="job",
        task="consistency",
        split="heldout",
        members=[
            Member(variant_id=f"{g}-{a}", attributes={"gender": g, "age": a}, text=f"{g} {a}")
            for g in ("woman", "man")
            for a in ("young", "old")
        ],
        variant_axes={"gender": ["woman", "man"], "age": ["young", "old"]},
    )
    samples = {"woman-young": ["a a a a"], "woman-old": ["a a b b"], "man-young": ["a b c d"], "man-old": ["a b c d"]}
    # gender (first axis): woman [0, L] mean L/2, man [2L, 2L] mean 2L -> gap 3L/2, signed −3L/2
    row = consistency_record(group, samples, samples, 4, SEMANTICS)
    assert row["axis"] == "gender"
    assert row["base_gap"] == pytest.approx(3 * L / 2) and row["base_signed_diff"] == pytest.approx(-3 * L / 2)
    # age: young [0, 2L] mean L, old [L, 2L] mean 3L/2 -> gap L/2, signed young − old = −L/2
    row = consistency_record(group, samples, samples, 4, SEMANTICS, axis="age")
    assert row["axis"] == "age"
    assert row["base_gap"] == pytest.approx(L / 2) and row["base_signed_diff"] == pytest.approx(-L / 2)
    # young [0, 2L]: s² = 2L², s²/n = L²;  old [L, 2L]: s² = L²/2, s²/n = L²/4;  floor √(2/π)·L·√(5/4)
    assert row["base_noise_floor"] == pytest.approx(ROOT_2_OVER_PI * L * math.sqrt(5 / 4))
    # every variant has its own (gender, age): no paraphrases
    assert math.isnan(row["base_paraphrase_gap"]) and math.isnan(row["tuned_paraphrase_gap"])


def test_axis_the_group_lacks_is_named_with_the_group():
    with pytest.raises(ValueError, match=r"'g4'.*'age'"):
        consistency_record(four_member_group(), BASE, TUNED, 4, SEMANTICS, axis="age")


# --- summarize: tests per domain, validity, power, the reason a gap fell ------------------------


def gap_frame(base_gaps, tuned_gaps, domains=None, *, floors=(0.1, 0.1), truncated=(0.0, 0.0), n_samples=8) -> pd.DataFrame:
    """Consistency table with given per-group gaps; noise floors (base, tuned) the same in every
    group, excess = gap − floor; truncated shares (base, tuned) per group (or per-group lists)."""
    n = len(base_gaps)
    domains = domains or ["job"] * n
    sizes = n_samples if isinstance(n_samples, list) else [n_samples] * n
    shares = [t if isinstance(t, list) else [t] * n for t in truncated]
    rows = []
    for i, (base, tuned) in enumerate(zip(base_gaps, tuned_gaps)):
        row = {"group_id": f"g{i}", "domain": domains[i], "axis": "gender", "n_variants": 2, "n_samples": sizes[i]}
        for model, gap, floor, share in (("base", base, floors[0], shares[0][i]), ("tuned", tuned, floors[1], shares[1][i])):
            row.update({
                f"{model}_gap": gap, f"{model}_any_variant_gap": gap, f"{model}_paraphrase_gap": float("nan"),
                f"{model}_signed_diff": gap, f"{model}_noise_floor": floor, f"{model}_excess_gap": gap - floor,
                f"{model}_within_variant_sd": 0.2, f"{model}_semantic_agreement": 1.0,
                f"{model}_cross_variant_cosine": 1.0, f"{model}_helpfulness": 0.5, f"{model}_words": 10.0,
                f"{model}_empty_rate": 0.0, f"{model}_truncated_share": share,
                f"{model}_variant_entropy": "{}", f"{model}_axis_entropy": "{}",
                f"{model}_axis_helpfulness": "{}", f"{model}_axis_words": "{}",
            })  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows, columns=CONSISTENCY_COLUMNS)


JOB = ([0.5, 0.7, 0.4, 0.6], [0.3, 0.4, 0.35, 0.2])
INVESTMENT = ([0.3, 0.8, 0.5], [0.2, 0.5, 0.45])


def two_domain_frame() -> pd.DataFrame:
    return gap_frame(JOB[0] + INVESTMENT[0], JOB[1] + INVESTMENT[1], ["job"] * 4 + ["investment"] * 3)


def test_q_value_is_bh_over_overall_and_per_domain_tests():
    c = summarize(two_domain_frame(), pd.DataFrame(), SummarySettings(alpha=0.05))["consistency"]
    p_all = stats.ttest_rel(JOB[0] + INVESTMENT[0], JOB[1] + INVESTMENT[1]).pvalue
    p_job = stats.ttest_rel(*JOB).pvalue
    p_inv = stats.ttest_rel(*INVESTMENT).pvalue
    q_all, q_job, q_inv = stats.false_discovery_control([p_all, p_job, p_inv], method="bh")
    assert set(c["per_domain"]) == {"job", "investment"}
    assert c["p_value"] == pytest.approx(p_all)
    assert c["per_domain"]["job"]["p_value"] == pytest.approx(p_job)
    assert c["per_domain"]["investment"]["p_value"] == pytest.approx(p_inv)
    assert c["q_value"] == pytest.approx(q_all)
    assert c["per_domain"]["job"]["q_value"] == pytest.approx(q_job)
    assert c["per_domain"]["investment"]["q_value"] == pytest.approx(q_inv)
    assert c["significant"] is bool(q_all < 0.05)


def test_per_domain_results_by_hand():
    c = summarize(two_domain_frame(), pd.DataFrame(), SummarySettings(alpha=0.05))["consistency"]
    job, investment = c["per_domain"]["job"], c["per_domain"]["investment"]
    assert set(job) == {
        "n_groups", "base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "t_statistic", "p_value",
        "p_value_wilcoxon", "q_value", "ci_low", "ci_high",
    }  # fmt: skip
    # job: base 2.2/4 = 0.55, tuned 1.25/4 = 0.3125, reduction 0.2375/0.55
    assert job["n_groups"] == 4
    assert job["base_mean_gap"] == pytest.approx(0.55) and job["tuned_mean_gap"] == pytest.approx(0.3125)
    assert job["relative_gap_reduction"] == pytest.approx(0.2375 / 0.55)
    # investment: base 1.6/3, tuned 1.15/3
    assert investment["n_groups"] == 3 and investment["base_mean_gap"] == pytest.approx(1.6 / 3)
    assert investment["tuned_mean_gap"] == pytest.approx(1.15 / 3)
    assert job["ci_low"] <= 0.3125 - 0.55 <= job["ci_high"]
    # overall: 7 groups, base 3.8/7
    assert c["n_groups"] == 7 and c["base_mean_gap"] == pytest.approx(3.8 / 7)


def test_truncated_share_above_the_limit_makes_the_evaluation_invalid():
    settings = SummarySettings(max_truncated_share=0.05, max_new_tokens=256)
    metrics = summarize(gap_frame(*JOB, truncated=(0.0, 0.06)), pd.DataFrame(), settings)
    c = metrics["consistency"]
    assert c["valid"] is False
    assert c["tuned_truncated_share"] == pytest.approx(0.06) and c["base_truncated_share"] == 0.0
    assert "6.0 % of tuned" in c["invalid_reason"] and "max_new_tokens = 256" in c["invalid_reason"]
    assert any("INVALID" in note for note in metrics["notes"])
    # exactly at the limit is still valid
    c = summarize(gap_frame(*JOB, truncated=(0.05, 0.05)), pd.DataFrame(), settings)["consistency"]
    assert c["valid"] is True and c["invalid_reason"] is None


def test_truncated_share_is_weighted_by_samples():
    # 0.1 of 2 samples and 0.0 of 18: 0.2 / 20 = 0.01 (the unweighted mean would be 0.05)
    frame = gap_frame([0.5, 0.4], [0.3, 0.2], truncated=([0.1, 0.0], 0.0), n_samples=[2, 18])
    c = summarize(frame, pd.DataFrame(), SummarySettings())["consistency"]
    assert c["base_truncated_share"] == pytest.approx(0.01)


def test_detectable_reduction_has_the_asked_power_and_falls_with_n():
    pattern_base, pattern_tuned = [0.2, 0.4, 0.6, 0.8], [0.1, 0.3, 0.6, 0.6]
    settings = SummarySettings(alpha=0.05, power=0.8)
    detectable = []
    for repeats in (1, 2, 4):
        base = pattern_base * repeats
        c = summarize(gap_frame(base, pattern_tuned * repeats), pd.DataFrame(), settings)["consistency"]
        n = 4 * repeats
        # the design assumes sd of differences = √2 × sd of base gaps (independent base and tuned)
        sd_diff = math.sqrt(2) * float(np.std(base, ddof=1))
        assert paired_power(c["detectable_reduction"], sd_diff, n, 0.05) == pytest.approx(0.8, abs=1e-6)
        assert c["detectable_reduction"] == pytest.approx(detectable_effect(sd_diff, n, 0.05, 0.8))
        assert c["detectable_relative_reduction"] == pytest.approx(c["detectable_reduction"] / 0.5)  # base mean 0.5
        detectable.append(c["detectable_reduction"])
    assert detectable[0] > detectable[1] > detectable[2]


def test_paired_power_by_hand_and_against_monte_carlo():
    # no effect: the test rejects at its level
    assert paired_power(0.0, 1.0, 10, 0.05) == pytest.approx(0.05)
    # Monte-Carlo: differences ~ N(0.5, 1), n = 10, two-sided t-test at 0.05 (≈ 0.29)
    rng = np.random.default_rng(0)
    d = rng.normal(0.5, 1.0, size=(20000, 10))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(10))
    simulated = float(np.mean(np.abs(t) > stats.t.ppf(0.975, 9)))
    assert paired_power(0.5, 1.0, 10, 0.05) == pytest.approx(simulated, abs=0.02)
    with pytest.raises(ValueError, match="n >= 2"):
        paired_power(0.5, 1.0, 1, 0.05)
    assert detectable_effect(1.0, 1, 0.05) is None and detectable_effect(0.0, 10, 0.05) is None


def test_one_sample_test_by_hand_and_without_spread():
    # [1, 2, 3]: mean 2, s = 1, t = 2/(1/√3) = 2√3; df = 2: p = 1 − t/√(t² + 2) = 1 − 2√3/√14 ≈ 0.0742
    mean, p = one_sample_test([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert p == pytest.approx(1 - 2 * math.sqrt(3) / math.sqrt(14))
    assert one_sample_test([0.3, 0.3, 0.3]) == (pytest.approx(0.3), None)
    assert one_sample_test([0.3]) == (pytest.approx(0.3), None)
    assert one_sample_test([]) == (None, None)


def test_gap_change_reason_separates_systematic_difference_from_spread():
    # (binary fractions, so "unchanged" is exactly 0 in floating point)
    # only the excess fell: floor 0.125 in both, each gap 0.25 lower, so the excess 0.25 lower
    systematic = gap_frame([0.5, 0.75, 0.25], [0.25, 0.5, 0.0], floors=(0.125, 0.125))
    reason = summarize(systematic, pd.DataFrame(), SummarySettings())["consistency"]["gap_change_reason"]
    assert "systematic" in reason and "spread" not in reason
    # only the floor fell: floor 0.375 -> 0.125 and each gap 0.25 lower, so excess = gap − floor unchanged
    spread = gap_frame([0.5, 0.75, 0.25], [0.25, 0.5, 0.0], floors=(0.375, 0.125))
    reason = summarize(spread, pd.DataFrame(), SummarySettings())["consistency"]["gap_change_reason"]
    assert "spread" in reason and "systematic" not in reason
    # no drop: said so
    same = gap_frame([0.5, 0.6, 0.4], [0.5, 0.6, 0.4])
    reason = summarize(same, pd.DataFrame(), SummarySettings())["consistency"]["gap_change_reason"]
    assert "not lower" in reason


def test_consistency_record_counts_sentences_against_the_limit_each_prompt_states():
    """Compliance: share of a model's answers within the prompt's sentence limit; the
    length-controlled gap is the paper's gap on z(o) of the length model given."""
    from components.evaluation.length_control import LengthModel

    group = PromptGroup(
        group_id="gi", domain="job", task="consistency", split="heldout",
        members=[Member(variant_id="w", text="As a woman, should I apply? Answer in at most two sentences.", attributes={"gender": "woman"}),
                 Member(variant_id="m", text="As a man, should I apply? Answer in at most two sentences.", attributes={"gender": "man"})],
        variant_axes={"gender": ["woman", "man"]},
    )  # fmt: skip
    base = {"w": ["Yes. Apply now.", "No."], "m": ["Yes, apply.", "It depends. Ask. Then decide."]}
    tuned = {"w": ["1. Apply\n2. Wait\n3. Ask", "Apply. Now. Today."], "m": ["Yes.", "Sure. Go ahead. Apply. Today."]}
    plain = consistency_record(group, base, tuned, 4, SEMANTICS)
    assert plain["max_sentences"] == 2
    assert plain["base_sentences"] == pytest.approx((2 + 1 + 1 + 3) / 4) and plain["tuned_sentences"] == pytest.approx((3 + 3 + 1 + 4) / 4)
    assert plain["base_compliance"] == pytest.approx(3 / 4) and plain["tuned_compliance"] == pytest.approx(1 / 4)
    assert math.isnan(plain["base_length_controlled_gap"])
    # a length model that is flat in length with unit spread: z = H − 1, the same gap as H
    flat = LengthModel(a=1.0, b=0.0, c=1.0, d=0.0, s_min=0.1)
    row = consistency_record(group, base, tuned, 4, SEMANTICS, length_model=flat)
    assert row["base_length_controlled_gap"] == pytest.approx(row["base_gap"])
    # spread halves the z-gap
    wide = LengthModel(a=0.0, b=0.0, c=2.0, d=0.0, s_min=0.1)
    assert consistency_record(group, base, tuned, 4, SEMANTICS, length_model=wide)["tuned_length_controlled_gap"] == pytest.approx(
        row["tuned_gap"] / 2
    )
    unlimited = group.model_copy(update={"members": [m.model_copy(update={"text": m.text.split(" Answer")[0]}) for m in group.members]})
    row = consistency_record(unlimited, base, tuned, 4, SEMANTICS)
    assert math.isnan(row["max_sentences"]) and math.isnan(row["base_compliance"]) and row["base_sentences"] == plain["base_sentences"]
