"""Policy losses: the surrogate l_it of token t of sample i, registered by name (`train.policy_loss`).

In the spirit of verl's `register_policy_loss`. A policy loss maps the current log-probs
logp (B, T) (with grad), the behaviour log-probs old (B, T), the advantages A (B,) and the
completion mask m (B, T) to a per-token loss; the loss type (`components.grpo.losses`) then
aggregates it, and the importance weight of the engine/trainer mismatch and the beta k3 KL term
are applied around it (`losses.clipped_token_loss`). Signature, for user-defined surrogates:

    @register_policy_loss("name")
    def f(logp, old_logp, advantages, mask, eps_low, eps_high) -> Surrogate

- `ppo_clip` (PPO, Schulman et al. 2017; the GRPO surrogate of Shao et al. 2024, DeepSeekMath):
      r_it = exp(logp_it - old_it)
      l_it = -min(r_it A_i, clip(r_it, 1 - eps_low, 1 + eps_high) A_i)
- `gspo` (Group Sequence Policy Optimization, Zheng et al. 2025, arXiv:2507.18071): one
  importance ratio per sequence, the geometric mean of its token ratios,
      s_i  = exp( (1/|o_i|) sum_t m_it (logp_it - old_it) )
      l_it = -min(s_it A_i, clip(s_it, 1 - eps_low, 1 + eps_high) A_i)
      s_it = sg[s_i] * exp(logp_it - sg[logp_it])        (value s_i; grad s_i * grad logp_it)
  written per token as the paper's GSPO-token with A_it = A_i, which it shows equal to GSPO in
  value, clipping and gradient; with the `grpo` loss type (w_i = 1 / (N |o_i|)) the step's loss is
  the paper's -(1/N) sum_i min(s_i A_i, clip(s_i) A_i). s_i stays much closer to 1 than token
  ratios: the paper clips with eps_low = 3e-4, eps_high = 4e-4 (`train.epsilon_low/high`), not 0.2.

`clipped_low` / `clipped_high` mark tokens whose ratio lies outside [1 - eps_low, 1 + eps_high] on
the side where the clip removes the gradient (A < 0 below, A > 0 above).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from components.contracts.naming import NameRegistry


@dataclass
class Surrogate:
    loss: torch.Tensor  # (B, T) per-token surrogate loss l_it (before importance weight and KL)
    clipped_low: torch.Tensor  # (B, T) bool: ratio clipped below with A < 0
    clipped_high: torch.Tensor  # (B, T) bool: ratio clipped above with A > 0
    token_ratio: torch.Tensor | None = None  # (B, T) r_it = exp(logp - old) when computed (the KL ratio correction reuses it)


# (logp (B, T), old_logp (B, T), advantages (B,), mask (B, T), eps_low, eps_high) -> Surrogate
PolicyLossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, float], Surrogate]
POLICY_LOSSES = NameRegistry[PolicyLossFn]("policy loss")
register_policy_loss = POLICY_LOSSES.register


def get_policy_loss(name: str) -> PolicyLossFn:
    return POLICY_LOSSES.get(name)


def _clipped(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> Surrogate:
    """-min(ratio A, clip(ratio, 1 - eps_low, 1 + eps_high) A) and where the clip binds."""
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return Surrogate(
        loss=-torch.min(ratio * adv, clipped * adv),
        clipped_low=((ratio < 1 - eps_low) & (adv < 0)).detach(),
        clipped_high=((ratio > 1 + eps_high) & (adv > 0)).detach(),
    )


@register_policy_loss("ppo_clip")
def ppo_clip(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, eps_low: float, eps_high: float
) -> Surrogate:
    """l_it = -min(r_it A_i, clip(r_it, 1 - eps_low, 1 + eps_high) A_i), r_it = exp(logp_it - old_it)."""
    adv = advantages.unsqueeze(1).to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    surrogate = _clipped(ratio, adv, eps_low, eps_high)
    surrogate.token_ratio = ratio
    return surrogate


@register_policy_loss("gspo")
def gspo(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, eps_low: float, eps_high: float
) -> Surrogate:
    """l_it = -min(s_it A_i, clip(s_it, 1 - eps_low, 1 + eps_high) A_i), s_i = exp(mean_t (logp_it - old_it))."""
    adv = advantages.unsqueeze(1).to(logp.dtype)
    m = mask.to(logp.dtype)
    seq_log_ratio = ((logp - old_logp) * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)
    log_s = logp - logp.detach() + seq_log_ratio.detach().unsqueeze(1)
    return _clipped(torch.exp(log_s), adv, eps_low, eps_high)
