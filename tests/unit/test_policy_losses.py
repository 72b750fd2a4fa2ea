"""Policy losses (`train.policy_loss`): each surrogate by hand, and `ppo_clip` equal bit for bit to
the surrogate the update used before policy losses were registered."""

import math

import pytest
import torch

from components.contracts.naming import UnknownNameError
from components.grpo.losses import clipped_token_loss
from components.grpo.policy_losses import POLICY_LOSSES, get_policy_loss


def _previous_clipped_token_loss(logp, old_logp, ref_logp, advantages, eps_low, eps_high, beta, kl_ratio_correction, is_weight):
    """The update's loss before `train.policy_loss` existed (components/grpo/losses.py at b84422d)."""
    adv = advantages.unsqueeze(1).to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    loss = -torch.min(ratio * adv, clipped * adv)
    if is_weight is not None:
        loss = loss * is_weight.to(loss.dtype)
    delta = ref_logp - logp
    kl = torch.exp(delta) - delta - 1
    if kl_ratio_correction:
        kl = kl * ratio
    loss = loss + beta * kl
    return loss, kl.detach(), ((ratio < 1 - eps_low) & (adv < 0)), ((ratio > 1 + eps_high) & (adv > 0))


@pytest.mark.parametrize("kl_ratio_correction", [False, True])
def test_ppo_clip_reproduces_the_previous_update_loss_bit_for_bit(kl_ratio_correction):
    gen = torch.Generator().manual_seed(0)
    base = -torch.rand(3, 5, generator=gen) * 3
    old = base + 0.3 * torch.randn(3, 5, generator=gen)
    old[0, 0], old[1, 1] = base[0, 0] - 0.5, base[1, 1] + 0.5  # ratios e^0.5 (A > 0) and e^-0.5 (A < 0): clipped
    ref = base + 0.2 * torch.randn(3, 5, generator=gen)
    advantages = torch.tensor([1.3, -0.7, 0.0])
    is_weight = torch.rand(3, 5, generator=gen) + 0.5
    args = (0.2, 0.28, 0.04, kl_ratio_correction, is_weight)

    before = base.clone().requires_grad_(True)
    loss, kl, low, high = _previous_clipped_token_loss(before, old, ref, advantages, *args)
    loss.sum().backward()
    now = base.clone().requires_grad_(True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    terms = clipped_token_loss(now, old, ref, advantages, *args[:4], is_weight=is_weight, mask=mask, policy_loss="ppo_clip")
    terms.loss.sum().backward()

    assert torch.equal(terms.loss, loss) and torch.equal(terms.kl, kl)
    assert torch.equal(terms.clipped_low, low) and torch.equal(terms.clipped_high, high)
    assert torch.equal(now.grad, before.grad)
    assert low.any() and high.any(), "the example exercises both clips"


def test_ppo_clip_by_hand():
    old = torch.zeros(2, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]]))
    out = get_policy_loss("ppo_clip")(logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 3), 0.2, 0.28)
    # A = 1: -min(r, clip(r, 0.8, 1.28));  A = -1: -min(-r, -clip(r)) = max(r, clip(r))
    assert out.loss.tolist() == [pytest.approx([-1.28, -0.5, -1.1]), pytest.approx([1.5, 0.8, 1.1])]
    assert out.clipped_high.tolist() == [[True, False, False], [False, False, False]]
    assert out.clipped_low.tolist() == [[False, False, False], [False, True, False]]


def test_gspo_sequence_ratio_by_hand():
    # row 0: token log ratios ln 2, -ln 2 -> s = exp(0) = 1, inside the clip
    # row 1: 0.1, 0.3 -> s = exp(0.2) = 1.2214 > 1 + 0.2 with A > 0: clipped to 1.2
    # row 2: 0.1 and a padded token (log ratio 5, masked out) -> s = exp(0.1), A < 0: not clipped
    old = torch.zeros(3, 2)
    logp = torch.tensor([[math.log(2), -math.log(2)], [0.1, 0.3], [0.1, 5.0]], requires_grad=True)
    mask = torch.tensor([[True, True], [True, True], [True, False]])
    advantages = torch.tensor([0.5, 1.0, -1.0])
    out = get_policy_loss("gspo")(logp, old, advantages, mask, 0.2, 0.2)

    s2 = math.exp(0.1)
    assert out.loss.tolist() == [pytest.approx([-0.5, -0.5]), pytest.approx([-1.2, -1.2]), pytest.approx([s2, s2])]
    assert out.clipped_high.tolist() == [[False, False], [True, True], [False, False]]
    assert not out.clipped_low.any()
    (out.loss * mask).sum().backward()
    # d l_it / d logp_it = -A_i s_i where unclipped (s_it = sg[s_i] exp(logp_it - sg[logp_it])), 0 where clipped
    assert logp.grad.tolist() == [pytest.approx([-0.5, -0.5]), [0.0, 0.0], pytest.approx([s2, 0.0])]


def test_gspo_per_token_equals_the_papers_sequence_objective():
    """With the `grpo` weights 1 / (N |o_i|), sum_it w_i l_it is -(1/N) sum_i min(s_i A_i, clip(s_i) A_i),
    in value and gradient (GSPO-token with A_it = A_i, arXiv:2507.18071)."""
    gen = torch.Generator().manual_seed(1)
    old = -torch.rand(4, 6, generator=gen, dtype=torch.float64) * 2
    base = old + 0.05 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    advantages = torch.tensor([1.0, -0.5, 0.7, -1.2], dtype=torch.float64)
    eps_low, eps_high = 3e-4, 4e-4
    lengths = mask.sum(1).double()
    n = len(lengths)

    token = base.clone().requires_grad_(True)
    out = get_policy_loss("gspo")(token, old, advantages, mask, eps_low, eps_high)
    per_token = (out.loss * mask * (1.0 / (n * lengths)).unsqueeze(1).to(out.loss.dtype)).sum()
    per_token.backward()

    seq = base.clone().requires_grad_(True)
    s = torch.exp(((seq - old) * mask).sum(1) / mask.sum(1))
    paper = -torch.min(s * advantages, torch.clamp(s, 1 - eps_low, 1 + eps_high) * advantages).sum() / n
    paper.backward()

    assert per_token.item() == pytest.approx(paper.item(), rel=1e-12)
    assert torch.allclose(token.grad, seq.grad, rtol=1e-12, atol=1e-15)
    assert out.clipped_low.any() or out.clipped_high.any(), "the example exercises the small clip"


def test_policy_loss_is_chosen_by_name_and_an_unknown_one_lists_the_known():
    assert {"ppo_clip", "gspo"} <= set(POLICY_LOSSES)
    logp = torch.tensor([[0.1, 0.3]])
    gspo = clipped_token_loss(logp, torch.zeros(1, 2), None, torch.tensor([1.0]), 0.2, 0.2, 0.0, policy_loss="gspo")
    assert gspo.loss.tolist() == [pytest.approx([-1.2, -1.2])]
    with pytest.raises(UnknownNameError, match=r"unknown policy loss 'ppo'; known: \[.*'gspo'.*'ppo_clip'"):
        clipped_token_loss(logp, logp, None, torch.tensor([1.0]), 0.2, 0.2, 0.0, policy_loss="ppo")
