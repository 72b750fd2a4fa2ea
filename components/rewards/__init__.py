"""Reward functions; importing this package registers the built-in ones."""

from components.rewards import (
    consistency,  # noqa: F401  (registers entropy_helpfulness, stability)
    decision,  # noqa: F401  (registers decision_parity, planted_bias)
    diversity,  # noqa: F401  (registers frequency_aware)
    instruction,  # noqa: F401  (registers instruction_compliance)
)
from components.rewards.registry import REWARDS, compute_rewards, get_reward, register_reward

__all__ = ["REWARDS", "compute_rewards", "get_reward", "register_reward"]
