"""Rewards of information-consistent GRPO (Prabhune, Padmanabhan & Dutta 2025, arXiv:2512.12858).

    r_i = a * H_norm(o_i) + b * F_norm(o_i)       (a = 0.4, b = 0.6 in params.reward.weights)

- `entropy_helpfulness`: H_norm(o_i), see `components.rewards.entropy`.
- `stability`: for sample i of variant v in a group with variants V,
      gap_i    = mean_{u in V, u != v} | H_norm(o_i) - mean_k H_norm(o_{u,k}) |
      F_norm_i = 1 - min(gap_i / MAX_GAP, 1)        (MAX_GAP: params.reward.max_gap, H_norm scale)
  A response whose information content matches what the other variants of the same question get
  scores 1; a single-variant group has no gap and scores 1.
"""

from __future__ import annotations

from collections import defaultdict

from components.config import RewardConfig
from components.contracts.groups import PromptGroup
from components.contracts.rollouts import Rollout
from components.rewards.entropy import normalized_entropy
from components.rewards.registry import is_free_text, register_reward


@register_reward("entropy_helpfulness", kind="sample", applies=is_free_text)
def entropy_helpfulness(rollout: Rollout, group: PromptGroup, cfg: RewardConfig) -> float:
    """H_norm(o) = min(H(o) / log W_max, 1), or over sliding W_max-word windows (`reward.entropy_scope`)."""
    return normalized_entropy(rollout.completion, cfg.entropy_max_words, cfg.entropy_scope)


@register_reward("stability", kind="group", applies=is_free_text)
def stability(rollouts: list[Rollout], group: PromptGroup, cfg: RewardConfig) -> list[float]:
    """F_norm_i = 1 - min(mean_{u != v} |H_norm(o_i) - mean H_norm(o_u)| / MAX_GAP, 1)."""
    h = [normalized_entropy(r.completion, cfg.entropy_max_words, cfg.entropy_scope) for r in rollouts]
    by_variant: dict[str, list[float]] = defaultdict(list)
    for r, value in zip(rollouts, h):
        by_variant[r.variant_id].append(value)
    means = {v: sum(vals) / len(vals) for v, vals in by_variant.items()}
    rewards = []
    for r, value in zip(rollouts, h):
        others = [m for v, m in means.items() if v != r.variant_id]
        gap = sum(abs(value - m) for m in others) / len(others) if others else 0.0
        rewards.append(1.0 - min(gap / cfg.max_gap, 1.0))
    return rewards
