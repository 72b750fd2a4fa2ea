import pytest
import torch

from components.config import AdvantageConfig
from components.grpo.advantages import get_adv_est, group_mean_std


def test_group_mean_std_uses_explicit_index_not_position():
    rewards = torch.tensor([1.0, 10.0, 3.0, 20.0])
    index = torch.tensor([0, 1, 0, 1])  # interleaved groups
    mean, std = group_mean_std(rewards, index)
    assert mean.tolist() == pytest.approx([2.0, 15.0, 2.0, 15.0])
    assert std.tolist() == pytest.approx([2**0.5, 50**0.5, 2**0.5, 50**0.5])


def test_grpo_group_scaling_by_hand():
    rewards = torch.tensor([0.0, 1.0, 2.0, 5.0, 5.0, 5.0])
    index = torch.tensor([0, 0, 0, 1, 1, 1])
    adv = get_adv_est("grpo")(rewards, index, AdvantageConfig(scale="group", eps=1e-4))
    assert adv[:3].tolist() == pytest.approx([-1 / (1 + 1e-4), 0.0, 1 / (1 + 1e-4)], abs=1e-6)
    assert adv[3:].tolist() == [0.0, 0.0, 0.0]  # a group with one reward value carries no signal


def test_grpo_batch_and_no_scaling():
    rewards = torch.tensor([0.0, 2.0, 10.0, 14.0])
    index = torch.tensor([0, 0, 1, 1])
    none = get_adv_est("grpo")(rewards, index, AdvantageConfig(scale="none"))
    assert none.tolist() == pytest.approx([-1.0, 1.0, -2.0, 2.0])
    batch = get_adv_est("grpo")(rewards, index, AdvantageConfig(scale="batch", eps=1e-12))
    assert batch.tolist() == pytest.approx((none / rewards.std()).tolist(), abs=1e-6)


def test_unknown_estimator_lists_known_ones():
    with pytest.raises(KeyError, match="grpo"):
        get_adv_est("ppo")
