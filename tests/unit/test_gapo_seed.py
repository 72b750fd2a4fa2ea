"""GAPO frequency-aware reward and SEED-GRPO scaling on hand-computed cases from the papers."""

import math

import pytest
import torch

from components.config import AdvantageConfig, RewardConfig
from components.contracts.rollouts import Rollout
from components.grpo.advantages import get_adv_est
from components.grpo.semantic import answer_clusters, normalized_semantic_entropy, semantic_entropy
from components.rewards import get_reward
from tests.grpo_data import colour_group

COLOURS = colour_group("red", "green", "blue", "yellow")


def rollouts(*texts: str) -> list[Rollout]:
    return [Rollout(0, "colour", "p0", "q", t, (1,), (2,), False) for t in texts]


def frequency(*texts: str) -> list[float]:
    return get_reward("frequency_aware").fn(rollouts(*texts), COLOURS, RewardConfig())


def test_uniform_spread_over_the_valid_set_rewards_every_sample_one():
    assert frequency("Red.", "green", "It is blue", "Yellow!") == pytest.approx([1.0, 1.0, 1.0, 1.0])


def test_all_samples_the_same_answer_with_l4_gives_a_quarter():
    assert frequency("red", "Red", "RED.", "red") == pytest.approx([0.25] * 4)


def test_invalid_answers_get_minus_one_and_do_not_count_in_frequencies():
    # valid: red, red, blue -> f(red) = 2/3, f(blue) = 1/3; L = 4
    got = frequency("red", "red", "blue", "purple")
    assert got == pytest.approx([1 - abs(2 / 3 - 1 / 4), 1 - abs(2 / 3 - 1 / 4), 1 - abs(1 / 3 - 1 / 4), -1.0])


def test_frequency_reward_needs_a_valid_set():
    group = COLOURS.model_copy(update={"valid_answers": None})
    with pytest.raises(ValueError, match="colour"):
        get_reward("frequency_aware").fn(rollouts("red"), group, RewardConfig())


def test_semantic_entropy_by_hand():
    same = answer_clusters(rollouts("Red", "red.", "It's red"), COLOURS)
    assert semantic_entropy(same) == 0.0 and normalized_semantic_entropy(same) == 0.0
    spread = answer_clusters(rollouts("red", "green", "blue", "yellow"), COLOURS)
    assert semantic_entropy(spread) == pytest.approx(math.log(4))
    assert normalized_semantic_entropy(spread) == pytest.approx(1.0)
    half = answer_clusters(rollouts("red", "red", "blue", "blue"), COLOURS)
    assert normalized_semantic_entropy(half) == pytest.approx(math.log(2) / math.log(4))
    # without a valid answer, samples cluster by their normalised text
    assert len(set(answer_clusters(rollouts("no idea", "No idea!", "purple"), COLOURS))) == 2


def test_seed_grpo_scales_each_group_by_its_uncertainty():
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0])
    index = torch.tensor([0, 0, 1, 1])
    uncertainty = torch.tensor([0.0, 0.0, 1.0, 1.0])  # group 0 confident, group 1 maximally uncertain
    cfg = AdvantageConfig(seed_alpha=0.5)
    grpo = get_adv_est("grpo")(rewards, index, cfg)
    seed = get_adv_est("seed_grpo")(rewards, index, cfg, uncertainty)
    assert seed[:2].tolist() == pytest.approx(grpo[:2].tolist())
    assert seed[2:].tolist() == pytest.approx((0.5 * grpo[2:]).tolist())
    assert get_adv_est("seed_grpo")(rewards, index, AdvantageConfig(seed_alpha=2.0), uncertainty)[2:].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="semantic entropy"):
        get_adv_est("seed_grpo")(rewards, index, cfg)


@pytest.mark.parametrize(
    "scaling, alpha, expected",  # f(u) at u = 0, 0.5, 1, by hand
    [
        ("linear", 0.5, [1.0, 0.75, 0.5]),
        ("linear", 2.0, [1.0, 0.0, 0.0]),  # clamped at 0
        ("exp", 0.5, [1.0, math.exp(-0.25), math.exp(-0.5)]),
        ("focal", 2.0, [1.0, 0.25, 0.0]),  # (1 - u)^2
        ("focal", 0.5, [1.0, math.sqrt(0.5), 0.0]),
    ],
)
def test_seed_scaling_forms_by_hand(scaling, alpha, expected):
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    index = torch.tensor([0, 0, 1, 1, 2, 2])
    uncertainty = torch.tensor([0.0, 0.0, 0.5, 0.5, 1.0, 1.0])
    cfg = AdvantageConfig(seed_alpha=alpha, scaling=scaling)
    grpo = get_adv_est("grpo")(rewards, index, cfg)
    seed = get_adv_est("seed_grpo")(rewards, index, cfg, uncertainty)
    factors = [float(seed[i] / grpo[i]) for i in (1, 3, 5)]  # grpo[i] = +1/std, never 0 here
    assert factors == pytest.approx(expected, abs=1e-6)


def test_answer_clustering_is_refused_on_free_text_groups():
    from components.grpo.semantic import ClusteringError, check_answer_clustering

    free = COLOURS.model_copy(update={"group_id": "advice-7", "valid_answers": None, "answer_normalizer": None})
    seed = AdvantageConfig(estimator="seed_grpo", clustering="answer")
    with pytest.raises(ClusteringError, match=r"group advice-7: .*clustering 'answer' needs valid_answers.*use clustering: embedding"):
        check_answer_clustering([COLOURS, free], seed)
    check_answer_clustering([COLOURS], seed)  # a valid set: fine
    check_answer_clustering([free], AdvantageConfig(estimator="seed_grpo", clustering="embedding"))
    check_answer_clustering([free], AdvantageConfig(estimator="grpo", clustering="answer"))  # not scaled: fine


def test_validity_is_the_per_sample_baseline_reward():
    reward = get_reward("validity")
    assert reward.kind == "sample"
    got = [reward.fn(r, COLOURS, RewardConfig()) for r in rollouts("Red.", "red", "purple", "It is blue", "")]
    assert got == [1.0, 1.0, 0.0, 1.0, 0.0]  # repeats earn as much as new answers: no pressure to cover V
    with pytest.raises(ValueError, match="colour"):
        reward.fn(rollouts("red")[0], COLOURS.model_copy(update={"valid_answers": None}), RewardConfig())


def test_estimators_declare_whether_they_read_uncertainty():
    from components.grpo.advantages import ADVANTAGES, register_adv_est, uses_uncertainty

    assert uses_uncertainty("seed_grpo") and not uses_uncertainty("grpo")

    @register_adv_est("test_scaled")
    def scaled(rewards, index, cfg, uncertainty=None, global_std=None):
        return rewards * (1 - uncertainty)

    scaled.uses_uncertainty = True
    try:  # a user's estimator is clustered for, and refused on free text, like seed_grpo
        from components.grpo.semantic import ClusteringError, check_answer_clustering

        free = COLOURS.model_copy(update={"valid_answers": None, "answer_normalizer": None})
        with pytest.raises(ClusteringError):
            check_answer_clustering([free], AdvantageConfig(estimator="test_scaled", clustering="answer"))
        assert uses_uncertainty("test_scaled")
    finally:
        ADVANTAGES.pop("test_scaled")
