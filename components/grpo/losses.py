"""Clipped policy loss with a k3 KL penalty, and the registry of loss normalisations.

Per completion token t of sample i (the default `ppo_clip` surrogate, Shao et al. 2024; others in
components.grpo.policy_losses, chosen by `train.policy_loss`):

    rho_it = exp(logp_it - logp_old_it)
    l_it   = -min(rho_it A_i, clip(rho_it, 1 - eps_low, 1 + eps_high) A_i) + beta * k3_it
    k3_it  = exp(logp_ref_it - logp_it) - (logp_ref_it - logp_it) - 1     (Schulman 2020)

With rollouts from another engine (vLLM), the surrogate is multiplied by a truncated importance
weight w_it for the engine/trainer mismatch before the KL term is added (components.grpo.importance_sampling).

With `kl_ratio_correction` the KL term is rho_it * k3_it, whose gradient is the unbiased reverse-KL
gradient also off-policy (DeepSeek-V3.2, arXiv:2512.02556; TRL's `use_bias_correction_kl`).

The loss type fixes how l_it is aggregated over the whole step (all micro-batches, all ranks),
written as a per-sequence token weight w_i so that micro-batches and ranks can simply be summed:
loss = sum_i w_i sum_t l_it m_it (m: completion mask). N sequences, M micro-batches:

- `grpo`    w_i = 1 / (N |o_i|)        mean over each sequence, then over sequences (Shao et al. 2024)
- `bnpo`    w_i = 1 / (M T_b(i))       token mean within the micro-batch b(i) of T_b tokens, then mean
                                       over micro-batches (TRL's `bnpo`)
- `dr_grpo` w_i = 1 / (N L_max)        Dr. GRPO (Liu et al. 2025), L_max = max_new_tokens
- `dapo`    w_i = 1 / sum_j |o_j|      token-level mean over the step (Yu et al. 2025, DAPO)

With equal-size micro-batches these equal TRL's GRPOTrainer losses divided by its gradient
accumulation steps, i.e. the gradient of one optimizer step is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from components.contracts.naming import NameRegistry
from components.grpo.policy_losses import get_policy_loss

# (lengths (N,), micro_batch (N,) long, max_new_tokens) -> per-sequence weights (N,) float64
TokenWeightFn = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
LOSS_TYPES = NameRegistry[TokenWeightFn]("loss type")
register_loss_type = LOSS_TYPES.register


def get_loss_type(name: str) -> TokenWeightFn:
    return LOSS_TYPES.get(name)


@register_loss_type("grpo")
def grpo_weights(lengths: torch.Tensor, micro_batch: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """w_i = 1 / (N |o_i|)."""
    return 1.0 / (lengths.numel() * lengths.double().clamp(min=1))


@register_loss_type("bnpo")
def bnpo_weights(lengths: torch.Tensor, micro_batch: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """w_i = 1 / (M T_b(i)) with T_b the tokens of micro-batch b.

    A row outside every micro-batch (id −1: an empty completion, never forwarded) is not counted
    in M and gets weight 0.
    """
    ids, inverse = torch.unique(micro_batch, return_inverse=True)
    n_micro = max(int((ids >= 0).sum()), 1)
    tokens = torch.zeros(len(ids), dtype=torch.float64).index_add_(0, inverse, lengths.double())
    weights = 1.0 / (n_micro * tokens.clamp(min=1)[inverse])
    return torch.where(micro_batch >= 0, weights, torch.zeros_like(weights))


@register_loss_type("dr_grpo")
def dr_grpo_weights(lengths: torch.Tensor, micro_batch: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """w_i = 1 / (N L_max)."""
    return torch.full(lengths.shape, 1.0 / (lengths.numel() * max_new_tokens), dtype=torch.float64)


@register_loss_type("dapo")
def dapo_weights(lengths: torch.Tensor, micro_batch: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """w_i = 1 / sum_j |o_j|."""
    return torch.full(lengths.shape, 1.0 / max(int(lengths.sum()), 1), dtype=torch.float64)


@dataclass
class TokenLossTerms:
    loss: torch.Tensor  # (B, T) per-token loss l_it
    kl: torch.Tensor  # (B, T) k3 (zeros when beta == 0)
    clipped_low: torch.Tensor  # (B, T) bool: ratio clipped below with A < 0
    clipped_high: torch.Tensor  # (B, T) bool: ratio clipped above with A > 0


def clipped_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    eps_low: float,
    eps_high: float,
    beta: float,
    kl_ratio_correction: bool = False,
    is_weight: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    policy_loss: str = "ppo_clip",
) -> TokenLossTerms:
    """Per-token surrogate of `policy_loss` (components.grpo.policy_losses; times the importance
    weight `is_weight`, (B, T) or (B, 1), when given) + beta * k3; shapes (B, T), advantages (B,),
    `mask` the completion mask (all ones when None)."""
    surrogate = get_policy_loss(policy_loss)(
        logp, old_logp, advantages, torch.ones_like(logp, dtype=torch.bool) if mask is None else mask, eps_low, eps_high
    )
    loss = surrogate.loss
    if is_weight is not None:
        loss = loss * is_weight.to(loss.dtype)
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs reference log-probs")
        delta = ref_logp - logp
        kl = torch.exp(delta) - delta - 1
        if kl_ratio_correction:
            kl = kl * (surrogate.token_ratio if surrogate.token_ratio is not None else torch.exp(logp - old_logp))
        loss = loss + beta * kl
    else:
        kl = torch.zeros_like(logp)
    return TokenLossTerms(loss=loss, kl=kl.detach(), clipped_low=surrogate.clipped_low, clipped_high=surrogate.clipped_high)
