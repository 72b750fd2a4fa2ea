import math

import pytest

from components.config import RewardConfig
from components.contracts.rollouts import GroupBatch, Rollout
from components.data.schema import Member, PromptGroup
from components.rewards import compute_rewards, get_reward, register_reward
from components.rewards.entropy import normalized_entropy, response_entropy, windowed_entropy
from components.rewards.registry import REWARDS, RewardError

GROUP = PromptGroup(
    group_id="g0",
    domain="investment",
    task="consistency",
    split="train",
    variant_axes={"gender": ["woman", "man"]},
    members=[
        Member(variant_id="woman", attributes={"gender": "woman"}, text="As a woman, what should I invest in?"),
        Member(variant_id="man", attributes={"gender": "man"}, text="As a man, what should I invest in?"),
    ],
)


def rollout(variant: str, text: str, g: int = 0, group_id: str = "g0") -> Rollout:
    return Rollout(g, group_id, variant, "p", text, (1, 2), (3,), False)


def test_response_entropy_by_hand():
    assert response_entropy("") == 0.0
    assert response_entropy("stocks stocks") == 0.0
    assert response_entropy("a a b b") == pytest.approx(math.log(2))
    assert response_entropy("Bonds, bonds and ETFs!") == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))


def test_normalized_entropy_scales_and_saturates():
    assert normalized_entropy("a b c d", max_words=16) == pytest.approx(math.log(4) / math.log(16))
    assert normalized_entropy(" ".join(f"w{i}" for i in range(40)), max_words=16) == 1.0
    with pytest.raises(ValueError):
        normalized_entropy("a", max_words=1)


def test_windowed_entropy_by_hand():
    # "a b a c": windows of 3 are (a b a) and (b a c); H = mean of their entropies
    h_aba = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    assert windowed_entropy("a b a c", 3) == pytest.approx((h_aba + math.log(3)) / 2)
    assert windowed_entropy("a b", 3) == response_entropy("a b")  # shorter than the window: H(o)
    assert windowed_entropy("a a a a a", 2) == 0.0
    with pytest.raises(ValueError, match="window"):
        windowed_entropy("a b c", 1)


def test_windowed_helpfulness_does_not_pay_for_length():
    """Whole-answer H_norm grows with the number of distinct words; beyond W_max words the windowed one does not."""
    long = " ".join(f"w{i}" for i in range(200))
    short = " ".join(f"w{i}" for i in range(20))
    assert normalized_entropy(short, 64) == pytest.approx(math.log(20) / math.log(64))
    assert normalized_entropy(long, 64) == 1.0
    assert normalized_entropy(short, 16, "window") == normalized_entropy(long, 16, "window") == pytest.approx(1.0)
    # repeating itself lowers the windowed score: only lexical variety within W_max words pays
    assert normalized_entropy(" ".join(f"w{i % 4}" for i in range(200)), 16, "window") == pytest.approx(0.5)
    # shorter than W_max words: the same as the whole-answer score (a short answer still says less)
    assert normalized_entropy("a b c d", 16, "window") == normalized_entropy("a b c d", 16)
    with pytest.raises(ValueError, match="scope"):
        normalized_entropy("a b", 4, "sentence")


def test_reward_follows_entropy_scope():
    text = " ".join(f"w{i % 5}" for i in range(40))  # 5 distinct words, repeated
    rollouts = [rollout("woman", text)]
    answer = get_reward("entropy_helpfulness").fn(rollouts[0], GROUP, RewardConfig(entropy_max_words=16, entropy_scope="answer"))
    window = get_reward("entropy_helpfulness").fn(rollouts[0], GROUP, RewardConfig(entropy_max_words=16, entropy_scope="window"))
    assert answer == pytest.approx(math.log(5) / math.log(16))
    assert window == pytest.approx(normalized_entropy(text, 16, "window"))
    assert window < answer  # every 16-word window holds 5 words, 3-4 times each: below log 5


def test_stability_by_hand():
    cfg = RewardConfig(entropy_max_words=16, entropy_scope="answer", max_gap=1.0)  # h below: the whole answer's
    h = lambda text: normalized_entropy(text, 16)  # noqa: E731
    texts = {"woman": ["a b c d", "a a"], "man": ["a b", "a b c d e f g h"]}
    rollouts = [rollout(v, t) for v, ts in texts.items() for t in ts]
    got = get_reward("stability").fn(rollouts, GROUP, cfg)
    mean_w = (h("a b c d") + h("a a")) / 2
    mean_m = (h("a b") + h("a b c d e f g h")) / 2
    expected = [
        1 - abs(h("a b c d") - mean_m),
        1 - abs(h("a a") - mean_m),
        1 - abs(h("a b") - mean_w),
        1 - abs(h("a b c d e f g h") - mean_w),
    ]
    assert got == pytest.approx(expected)
    # identical information content across variants: perfectly stable
    same = [rollout("woman", "x y"), rollout("man", "p q")]
    assert get_reward("stability").fn(same, GROUP, cfg) == [1.0, 1.0]


def test_stability_gap_is_capped_by_max_gap():
    cfg = RewardConfig(entropy_max_words=4, max_gap=0.5)
    rollouts = [rollout("woman", "a b c d"), rollout("man", "")]
    assert get_reward("stability").fn(rollouts, GROUP, cfg) == [0.0, 0.0]


def test_compute_rewards_weights_per_group():
    cfg = RewardConfig(entropy_max_words=16, entropy_scope="answer", weights={"entropy_helpfulness": 0.4, "stability": 0.6})
    other = GROUP.model_copy(update={"group_id": "g1"})
    rollouts = [
        rollout("woman", "a b c d"),
        rollout("man", "a b c d"),
        rollout("woman", "a b", 1, "g1"),
        rollout("man", "a b c d", 1, "g1"),
    ]
    total, per_fn = compute_rewards(GroupBatch([GROUP, other], rollouts), cfg)
    h4, h2 = normalized_entropy("a b c d", 16), normalized_entropy("a b", 16)
    assert per_fn["entropy_helpfulness"].tolist() == pytest.approx([h4, h4, h2, h4])
    assert per_fn["stability"].tolist() == pytest.approx([1, 1, 1 - (h4 - h2), 1 - (h4 - h2)])
    assert total.tolist() == pytest.approx((0.4 * per_fn["entropy_helpfulness"] + 0.6 * per_fn["stability"]).tolist())


def test_nan_reward_stops_with_clear_error():
    @register_reward("test_nan_reward", kind="sample")
    def nan_reward(r, group, cfg):
        return float("nan")

    try:
        with pytest.raises(RewardError, match="test_nan_reward"):
            compute_rewards(GroupBatch([GROUP], [rollout("woman", "a")]), RewardConfig(weights={"test_nan_reward": 1.0}))
    finally:
        REWARDS.pop("test_nan_reward")


def test_unknown_reward_lists_known_ones():
    with pytest.raises(KeyError, match="entropy_helpfulness"):
        get_reward("nope")
