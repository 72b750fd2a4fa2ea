"""Advantage estimators, registered by name (in the spirit of verl's `register_adv_est`).

Each estimator maps rewards r (N,) and an explicit group index (N,) to advantages (N,). A group is
all samples of all variants of one question (consistency) or all samples of one prompt (diversity).
"""

from __future__ import annotations

from typing import Callable

import torch

from components.config import AdvantageConfig

AdvantageFn = Callable[[torch.Tensor, torch.Tensor, AdvantageConfig], torch.Tensor]
ADVANTAGES: dict[str, AdvantageFn] = {}


def register_adv_est(name: str):
    def decorator(fn: AdvantageFn) -> AdvantageFn:
        if name in ADVANTAGES:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGES[name] = fn
        return fn

    return decorator


def get_adv_est(name: str) -> AdvantageFn:
    if name not in ADVANTAGES:
        raise KeyError(f"unknown advantage estimator {name!r}; known: {sorted(ADVANTAGES)}")
    return ADVANTAGES[name]


def group_mean_std(rewards: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample mean and (unbiased, as TRL) std of the sample's group, shape (N,) each."""
    rewards = rewards.double()
    n_groups = int(index.max()) + 1
    counts = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, index, torch.ones_like(rewards))
    sums = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, index, rewards)
    mean = sums / counts
    sq = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, index, (rewards - mean[index]) ** 2)
    std = torch.sqrt(sq / (counts - 1).clamp(min=1))
    return mean[index], std[index]


@register_adv_est("grpo")
def grpo_advantage(rewards: torch.Tensor, index: torch.Tensor, cfg: AdvantageConfig) -> torch.Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath): A_i = (r_i - mean_g(r)) / (s + eps).

    s = std of the sample's group (`scale: group`), std of the whole batch (`batch`, as
    Dr. GRPO/REINFORCE++ suggest), or 1 (`none`, Dr. GRPO, Liu et al. 2025).
    """
    mean, group_std = group_mean_std(rewards, index)
    centred = rewards.double() - mean
    if cfg.scale == "group":
        scale = group_std
    elif cfg.scale == "batch":
        scale = rewards.double().std().expand_as(centred) if rewards.numel() > 1 else torch.ones_like(centred)
    else:
        return centred.float()
    return (centred / (scale + cfg.eps)).float()
