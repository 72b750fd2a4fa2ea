"""Advantage estimators, registered by name (in the spirit of verl's `register_adv_est`).

Each estimator maps rewards r (N,), an explicit group index (N,) and, optionally, the normalised
semantic entropy of each sample's group (N,) to advantages (N,). A group is all samples of all
variants of one question (consistency) or all samples of one prompt (diversity).
"""

from __future__ import annotations

from typing import Callable

import torch

from components.config import AdvantageConfig
from components.contracts.naming import NameRegistry

# every estimator (a user's plug-in too) takes (rewards, index, cfg, uncertainty=None, global_std=None)
# and returns advantages (N,); `global_std` is the std of the rewards over every rank's batch
AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES = NameRegistry[AdvantageFn]("advantage estimator")
register_adv_est = ADVANTAGES.register


def get_adv_est(name: str) -> AdvantageFn:
    return ADVANTAGES.get(name)


def uses_uncertainty(name: str) -> bool:
    """Whether estimator `name` reads each group's semantic entropy (it sets `uses_uncertainty = True`):
    the trainer clusters the samples only for those, and by the estimator's declaration, not its name."""
    return bool(getattr(get_adv_est(name), "uses_uncertainty", False))


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
def grpo_advantage(rewards: torch.Tensor, index: torch.Tensor, cfg: AdvantageConfig,
                   uncertainty: torch.Tensor | None = None, global_std: float | None = None) -> torch.Tensor:  # fmt: skip
    """GRPO (Shao et al. 2024, DeepSeekMath): A_i = (r_i - mean_g(r)) / (s + eps).

    s = std of the sample's group (`scale: group`), std of the whole batch (`batch`, as
    Dr. GRPO/REINFORCE++ suggest; `global_std` is the std over every rank's batch), or 1
    (`none`, Dr. GRPO, Liu et al. 2025).
    """
    mean, group_std = group_mean_std(rewards, index)
    centred = rewards.double() - mean
    if cfg.scale == "group":
        scale = group_std
    elif cfg.scale == "batch":
        if global_std is not None:
            scale = torch.full_like(centred, global_std)
        else:
            scale = rewards.double().std().expand_as(centred) if rewards.numel() > 1 else torch.ones_like(centred)
    else:
        return centred.float()
    return (centred / (scale + cfg.eps)).float()


@register_adv_est("seed_grpo")
def seed_grpo_advantage(rewards: torch.Tensor, index: torch.Tensor, cfg: AdvantageConfig,
                        uncertainty: torch.Tensor | None = None, global_std: float | None = None) -> torch.Tensor:  # fmt: skip
    """SEED-GRPO (Chen et al. 2025, arXiv:2505.12346): A'_i = A_i * f(u_g), u_g = SE_g / log G.

    A_i is the `grpo` advantage; u_g the normalised semantic entropy of the sample's group over
    meaning clusters (`uncertainty`, see components.grpo.semantic). Confident groups keep their
    signal, uncertain ones update conservatively. `cfg.scaling` picks f (`seed_scale`).
    """
    if uncertainty is None:
        raise ValueError("seed_grpo needs the semantic entropy of each sample's group")
    scale = seed_scale(uncertainty.double(), cfg.seed_alpha, cfg.scaling)
    return (grpo_advantage(rewards, index, cfg, global_std=global_std).double() * scale).float()


seed_grpo_advantage.uses_uncertainty = True


def seed_scale(u: torch.Tensor, alpha: float, scaling: str) -> torch.Tensor:
    """f(u) for u = SE / log G in [0, 1]:

    linear  max(1 - alpha u, 0)   the paper's form
    exp     exp(-alpha u)         never reaches 0: the most uncertain group keeps e^-alpha
    focal   (1 - u)^alpha         alpha as the focusing exponent (focal loss's gamma)
    """
    if scaling == "linear":
        return (1.0 - alpha * u).clamp(min=0.0)
    if scaling == "exp":
        return torch.exp(-alpha * u)
    if scaling == "focal":
        return (1.0 - u).clamp(min=0.0) ** alpha
    raise ValueError(f"seed_grpo scaling {scaling!r}: expected linear, exp or focal")


def advantage_stages(
    rewards: torch.Tensor,
    index: torch.Tensor,
    cfg: AdvantageConfig,
    final: torch.Tensor,
    global_std: float | None = None,
) -> dict[str, torch.Tensor]:
    """The advantage after each transformation, for logging: centred -> scaled -> final."""
    mean, _ = group_mean_std(rewards, index)
    return {
        "centred": rewards.double() - mean,
        "scaled": grpo_advantage(rewards, index, cfg, global_std=global_std).double(),
        "final": final.double(),
    }
