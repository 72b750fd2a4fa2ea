"""Truncated importance sampling for the mismatch between the rollout engine and the trainer.

An inference engine (vLLM: other kernels, bf16, batch-dependent reductions) samples from a policy
π_engine that is not exactly the trainer's π_θ even with identical weights, so its rollouts are
slightly off-policy. Following Yao et al. 2025 ("Your efficient RL framework secretly brings you
off-policy RL training"), TRL's `vllm_importance_sampling_*` and ms-swift's "training-inference
mismatch" correction, with old log-probs computed by the trainer:

    Δ_it = log π_θold(o_it) − log π_engine(o_it)
    token_*     ρ_it = exp(Δ_it)                  sequence_*   ρ_i = exp(Σ_t Δ_it)
    *_truncate  w = clamp(ρ, C_min, C_max)        *_mask       w = ρ · 1[C_min ≤ ρ ≤ C_max]

The surrogate of token t is multiplied by w (losses.clipped_token_loss). Logged per step:
mean |Δ| over tokens, the largest |Δ|, and the share of tokens whose ratio fell outside [C_min, C_max].
"""

from __future__ import annotations

import torch

from components.config import ImportanceSamplingConfig


def importance_weights(
    trainer_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor, cfg: ImportanceSamplingConfig
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(weights (B, T) or (B, 1), or None when mode is none; stats [Σ|Δ|, tokens, outside, max|Δ|]).

    Shapes (B, T); `mask` marks completion tokens. Everything is detached: w is a constant weight.
    """
    mask = mask.bool()
    delta = ((trainer_logp.detach().double() - engine_logp.double()) * mask).nan_to_num(0.0)
    tokens = mask.sum()
    abs_delta = delta.abs()
    if cfg.mode == "none":
        ratio, weights = torch.exp(delta), None
    else:
        ratio = torch.exp(delta.sum(dim=1, keepdim=True)) if cfg.mode.startswith("sequence") else torch.exp(delta)
        if cfg.mode.endswith("truncate"):
            weights = ratio.clamp(min=cfg.clip_min, max=cfg.clip_max)
        else:
            weights = ratio * ((ratio >= cfg.clip_min) & (ratio <= cfg.clip_max))
    outside = ((ratio < cfg.clip_min) | (ratio > cfg.clip_max)).expand_as(mask) & mask
    stats = torch.tensor(
        [float(abs_delta.sum()), float(tokens), float(outside.sum()), float(abs_delta.max()) if tokens else 0.0],
        dtype=torch.float64,
    )
    return (weights.to(trainer_logp.dtype) if weights is not None else None), stats


def pack_engine_logprobs(logprobs: list[tuple[float, ...]], width: int) -> torch.Tensor:
    """Per-row engine log-probs right-padded with 0 to `width` (the completion layout of logprobs.pack)."""
    out = torch.zeros((len(logprobs), width), dtype=torch.float32)
    for i, row in enumerate(logprobs):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out
