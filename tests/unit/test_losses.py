import math

import pytest
import torch

from components.grpo.losses import clipped_token_loss, get_loss_type


def test_on_policy_loss_and_gradient_are_minus_advantage():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    terms = clipped_token_loss(logp, logp.detach(), None, torch.tensor([0.5]), 0.2, 0.2, beta=0.0)
    assert terms.loss[0].tolist() == pytest.approx([-0.5, -0.5])
    terms.loss.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([-0.5, -0.5])


def test_ratio_clipping_by_hand():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    pos = clipped_token_loss(logp, old, None, torch.tensor([1.0]), 0.2, 0.28, 0.0)
    assert pos.loss[0].tolist() == pytest.approx([-1.28, -0.5, -1.1], abs=1e-6)
    assert pos.clipped_high.tolist() == [[True, False, False]]
    neg = clipped_token_loss(logp, old, None, torch.tensor([-1.0]), 0.2, 0.28, 0.0)
    assert neg.loss[0].tolist() == pytest.approx([1.5, 0.8, 1.1], abs=1e-6)
    assert neg.clipped_low.tolist() == [[False, True, False]]


def test_k3_kl_by_hand():
    logp = torch.tensor([[-1.0, -1.0]])
    ref = torch.tensor([[-1.0, -2.0]])
    terms = clipped_token_loss(logp, logp, ref, torch.tensor([0.0]), 0.2, 0.2, beta=0.5)
    k3 = math.exp(-1.0) - (-1.0) - 1
    assert terms.kl[0].tolist() == pytest.approx([0.0, k3])
    assert terms.loss[0].tolist() == pytest.approx([0.0, 0.5 * k3])
    with pytest.raises(ValueError):
        clipped_token_loss(logp, logp, None, torch.tensor([0.0]), 0.2, 0.2, beta=0.5)


def test_loss_type_token_weights():
    lengths = torch.tensor([2.0, 4.0, 6.0])
    micro = torch.tensor([0, 0, 1])  # two micro-batches: 6 tokens and 6 tokens
    assert get_loss_type("grpo")(lengths, micro, 8).tolist() == pytest.approx([1 / 6, 1 / 12, 1 / 18])
    assert get_loss_type("dr_grpo")(lengths, micro, 8).tolist() == pytest.approx([1 / 24] * 3)
    assert get_loss_type("dapo")(lengths, micro, 8).tolist() == pytest.approx([1 / 12] * 3)
    # bnpo: token mean inside each micro-batch, then mean over the M = 2 micro-batches
    assert get_loss_type("bnpo")(lengths, micro, 8).tolist() == pytest.approx([1 / 12, 1 / 12, 1 / 12])
    assert get_loss_type("bnpo")(lengths, torch.tensor([0, 1, 1]), 8).tolist() == pytest.approx([1 / 4, 1 / 20, 1 / 20])
    # an empty completion sits in no micro-batch (id -1): weight 0, and M stays 2
    assert get_loss_type("bnpo")(torch.tensor([2.0, 4.0, 6.0, 0.0]), torch.tensor([0, 0, 1, -1]), 8).tolist() == pytest.approx(
        [1 / 12, 1 / 12, 1 / 12, 0.0]
    )
    with pytest.raises(KeyError, match="dapo"):
        get_loss_type("nope")
