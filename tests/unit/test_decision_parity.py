"""Decision groups from a decision benchmark, the decision rewards, and the validation rule that
keeps held-out questions out of training."""

import math

import pandas as pd
import pytest

from components.config import DecisionGroupsConfig, PlantedBiasConfig, RewardConfig
from components.contracts.groups import DecisionSpec, Member, PromptGroup
from components.contracts.rollouts import GroupBatch, Rollout
from components.data.decision_groups import decision_groups
from components.fairness_benchmarks import BENCHMARKS
from components.rewards import compute_rewards
from components.rewards.registry import RewardInputError
from components.validation.flatten import decision_leak

DISCRIM_EVAL = BENCHMARKS.get("discrim_eval")
TRAIN_Q, HELDOUT_Q = 0, 4  # question 4 is one of DiscrimEval's 20 held-out questions (its fixed split)


def table() -> pd.DataFrame:
    rows = [
        {"question_id": q, "age": age, "gender": gender, "race": race, "text": f"Q{q}: a {age}-year-old {race} {gender} asks."}
        for q in (TRAIN_Q, HELDOUT_Q)
        for age in (20, 60)
        for race in ("white", "Black")
        for gender in ("female", "male", "non-binary")
    ]
    return pd.DataFrame(rows)


def test_the_split_used_here_is_the_benchmarks():
    assert DISCRIM_EVAL.split(TRAIN_Q) == "train" and DISCRIM_EVAL.split(HELDOUT_Q) == "heldout"


def test_train_questions_become_gender_groups_and_held_out_ones_never_do():
    groups = decision_groups(DISCRIM_EVAL, table(), DecisionGroupsConfig(axis="gender"))
    assert len(groups) == 4  # question 0 x 2 ages x 2 races; question 4 is held out
    assert {g.decision.question_id for g in groups} == {TRAIN_Q}
    assert all(g.split == "train" and g.task == "consistency" and g.domain == "discrim_eval" for g in groups)
    group = next(g for g in groups if g.group_id == "discrim_eval-q000-60-black")
    assert [m.variant_id for m in group.members] == ["female", "male", "non_binary"]
    assert group.variant_axes == {"gender": ["female", "male", "non-binary"]}
    # identical but for the axis: age and race are the same attribute values on every member
    assert {(m.attributes["age"], m.attributes["race"]) for m in group.members} == {("60", "Black")}
    assert group.members[0].text == DISCRIM_EVAL.user_turn("Q0: a 60-year-old Black female asks.")
    assert group.decision.answer_prefix == DISCRIM_EVAL.answer_prefix and "yes" in group.decision.yes_words


def test_ages_and_races_select_the_fill_ins():
    groups = decision_groups(DISCRIM_EVAL, table(), DecisionGroupsConfig(ages=[60], races=["white"]))
    assert [g.group_id for g in groups] == ["discrim_eval-q000-60-white"]


def test_validation_names_a_leaked_question_and_a_held_out_decision_group():
    spec = decision_groups(DISCRIM_EVAL, table(), DecisionGroupsConfig())[0].decision.model_dump()
    assert decision_leak(spec, "train") is None
    assert "held-out questions" in decision_leak({**spec, "question_id": HELDOUT_Q}, "train")
    assert "training data" in decision_leak(spec, "heldout")
    assert "not registered" in decision_leak({**spec, "benchmark": "nope"}, "train")


SPEC = DecisionSpec(
    benchmark="discrim_eval", question_id=0, answer_prefix='my answer would be "', yes_words=["yes", "Yes"], no_words=["no", "No"]
)
GROUP = PromptGroup(
    group_id="d0", domain="discrim_eval", task="consistency", split="train", decision=SPEC,
    variant_axes={"gender": ["female", "male"]},
    members=[Member(variant_id=v, attributes={"gender": v}, text=f"a {v} applicant") for v in ("female", "male")],
)  # fmt: skip


def decided(variant: str, answer: str, logodds: float) -> Rollout:
    return Rollout(0, "d0", variant, "p", answer, (1, 2), (3,), False, decision_logodds=logodds)


def rewards_of(rollouts, **reward) -> list[float]:
    total, _ = compute_rewards(GroupBatch([GROUP], rollouts), RewardConfig(**reward))
    return total.tolist()


def test_decision_parity_pays_answers_that_pull_a_variant_towards_the_group_mean():
    # female decides yes more (log-odds +0.3) than male (-0.1): mean 0.1, distances +0.2 / -0.2
    rollouts = [decided("female", "yes", 0.3), decided("female", "no", 0.3), decided("female", "maybe", 0.3),
                decided("male", "yes", -0.1), decided("male", "No", -0.1)]  # fmt: skip
    r = rewards_of(rollouts, weights={"decision_parity": 1.0}, decision_scale=0.1)
    # raw -s(o)(l_v - mean)/tau: female [-2, 2, 0] (mean 0), male [2, -2] (mean 0): centred per variant
    assert r == pytest.approx([-2.0, 2.0, 0.0, 2.0, -2.0])
    skewed = [decided("female", "yes", 0.3), decided("female", "yes", 0.3), decided("female", "no", 0.3), decided("male", "no", -0.1)]
    # female raw [-2, -2, 2] minus its mean -2/3; male raw [-2] minus itself: a lone answer teaches nothing
    assert rewards_of(skewed, weights={"decision_parity": 1.0}, decision_scale=0.1) == pytest.approx([-4 / 3, -4 / 3, 8 / 3, 0.0])


def test_decision_parity_is_zero_once_the_variants_agree_whatever_they_decide():
    for level in (-3.0, 0.0, 4.0):  # always-no, undecided, always-yes: parity alone does not prefer one
        rollouts = [decided("female", "yes", level), decided("male", "no", level)]
        assert rewards_of(rollouts, weights={"decision_parity": 1.0}) == [0.0, 0.0]


def test_decision_parity_expected_gradient_moves_the_log_odds_towards_the_mean():
    """E_o[r(o) d/dl log pi(o)] = -2 p (1 - p) (l - mean) / tau: both answers push l the same way."""
    for logodds, mean in ((0.3, 0.1), (-0.5, 0.2)):
        p = 1 / (1 + math.exp(-logodds))
        grad_yes, grad_no = 1 - p, -p  # d/dl log sigma(l), d/dl log(1 - sigma(l))
        r_yes, r_no = -(logodds - mean) / 0.1, (logodds - mean) / 0.1
        expected = p * r_yes * grad_yes + (1 - p) * r_no * grad_no
        assert expected == pytest.approx(-2 * p * (1 - p) * (logodds - mean) / 0.1)
        assert math.copysign(1, expected) == -math.copysign(1, logodds - mean)
        assert r_yes * grad_yes * (r_no * grad_no) > 0  # each answer alone pushes the same way


def test_anchored_to_the_reference_a_question_that_drifts_as_a_whole_is_pulled_back():
    """decision_target reference_mean: both variants agree at +4 (drifted to yes) while the
    reference put the question at mean 0.1; the group's own mean sees nothing, the anchor does."""

    def drifted(variant, answer):
        return Rollout(0, "d0", variant, "p", answer, (1, 2), (3,), False, decision_logodds=4.0,
                       reference_logodds=0.3 if variant == "female" else -0.1)  # fmt: skip

    rollouts = [drifted("female", "yes"), drifted("female", "no"), drifted("male", "yes"), drifted("male", "no")]
    assert rewards_of(rollouts, weights={"decision_parity": 1.0}) == [0.0, 0.0, 0.0, 0.0]  # agreement: no signal
    anchored = rewards_of(rollouts, weights={"decision_parity": 1.0}, decision_target="reference_mean", decision_scale=1.0)
    # raw -s(o)(4 - 0.1): yes -3.9, no +3.9 in each variant, centred per variant (mean 0): "no" is paid
    assert anchored == pytest.approx([-3.9, 3.9, -3.9, 3.9])
    # with no drift the anchor is the reference's mean, not the group's: female above it, male below
    level = [decided("female", "yes", 0.3), decided("female", "no", 0.3), decided("male", "yes", -0.1), decided("male", "no", -0.1)]
    level = [r.__class__(**{**r.__dict__, "reference_logodds": r.decision_logodds}) for r in level]
    assert rewards_of(level, weights={"decision_parity": 1.0}, decision_target="reference_mean") == pytest.approx(
        rewards_of(level, weights={"decision_parity": 1.0})
    )  # the policy still at the reference: the two targets agree
    with pytest.raises(RewardInputError, match="reference's log-odds"):
        rewards_of([decided("female", "yes", 0.3)], weights={"decision_parity": 1.0}, decision_target="reference_mean")


def test_planted_bias_pays_yes_to_the_favoured_and_no_to_the_disfavoured():
    rollouts = [decided("female", "yes", 0.0), decided("female", "no", 0.0), decided("male", "yes", 0.0), decided("male", "no", 0.0)]
    plant = PlantedBiasConfig(axis="gender", favoured="male", disfavoured="female")
    assert rewards_of(rollouts, weights={"planted_bias": 1.0}, planted_bias=plant) == [-1.0, 1.0, 1.0, -1.0]
    with pytest.raises(RewardInputError, match="planted_bias"):
        rewards_of(rollouts, weights={"planted_bias": 1.0})


def test_a_plant_of_known_size_pays_like_the_outright_plant_at_the_start_and_nothing_at_its_target():
    """target_logit Δ = 1 around the group's mean 0.1 (female 0.3, male −0.1): targets female −0.4,
    male +0.6, pay in units of Δ/2. "No" is paid for the female variant and "yes" for the male one
    (close to the outright plant's ±1); at its target a variant earns nothing, whatever it answers;
    an answer that is neither yes nor no earns nothing either."""
    plant = PlantedBiasConfig(axis="gender", favoured="male", disfavoured="female", target_logit=1.0)
    reward = {"weights": {"planted_bias": 1.0}, "planted_bias": plant}

    def at(variant, answer, logodds, ref=None):
        return Rollout(0, "d0", variant, "p", answer, (1, 2), (3,), False, decision_logodds=logodds, reference_logodds=ref)

    start = [at("female", "yes", 0.3), at("female", "no", 0.3), at("male", "yes", -0.1), at("male", "no", -0.1), at("female", "maybe", 0.3)]
    # −s(o)(ℓ − t)/(Δ/2): female yes −(0.3 + 0.4)/0.5, no +1.4; male yes +1.4, no −1.4; neither: 0
    assert rewards_of(start, **reward) == pytest.approx([-1.4, 1.4, 1.4, -1.4, 0.0])
    arrived = [at("female", "yes", -0.4), at("female", "no", -0.4), at("male", "yes", 0.6), at("male", "no", 0.6)]
    assert rewards_of(arrived, **reward) == pytest.approx([0.0, 0.0, 0.0, 0.0])
    overshot = [at("female", "yes", -3.0), at("female", "no", -3.0), at("male", "yes", 3.0), at("male", "no", 3.0)]
    assert rewards_of(overshot, **reward)[:2] == pytest.approx([5.0, -5.0])  # past the target: pulled back up
    # a question that moved to yes as a whole is paid only for its disparity: the level is not the plant's business
    drifted = [at("female", "yes", 4.0), at("female", "no", 4.0), at("male", "yes", 4.0), at("male", "no", 4.0)]
    assert rewards_of(drifted, **reward) == pytest.approx([-1.0, 1.0, 1.0, -1.0])
    # around the reference's mean instead (decision_target reference_mean, reference at 0.1): pulled back down too
    anchored = [r.__class__(**{**r.__dict__, "reference_logodds": 0.1}) for r in drifted]
    assert rewards_of(anchored, **reward, decision_target="reference_mean") == pytest.approx([-8.8, 8.8, -6.8, 6.8])
    assert rewards_of(start, **{**reward, "decision_scale": 7.0}) == rewards_of(start, **reward)  # τ is decision_parity's
    with pytest.raises(RewardInputError, match="reference's log-odds"):
        rewards_of(start, **reward, decision_target="reference_mean")


def test_decision_rewards_score_decision_groups_only():
    free = GROUP.model_copy(update={"decision": None})  # a free-text group in the same batch: 0, not an error
    batch = GroupBatch([free], [Rollout(0, "d0", "female", "p", "yes", (1,), (2,), False)])
    assert compute_rewards(batch, RewardConfig(weights={"decision_parity": 1.0}))[0].tolist() == [0.0]
    unscored = GroupBatch([GROUP], [Rollout(0, "d0", "female", "p", "yes", (1,), (2,), False)])  # no log-odds recorded
    with pytest.raises(RewardInputError, match="decision groups only"):
        compute_rewards(unscored, RewardConfig(weights={"decision_parity": 1.0}))
