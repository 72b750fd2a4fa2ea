"""Reward registry: per-sample and whole-group reward functions, combined with weights.

Signatures (documented for user-defined rewards):

    @register_reward("name", kind="sample")
    def f(rollout: Rollout, group: PromptGroup, cfg: RewardConfig) -> float

    @register_reward("name", kind="group")
    def g(rollouts: list[Rollout], group: PromptGroup, cfg: RewardConfig) -> list[float]
        # receives *all* rollouts of one group (every variant, every sample), returns one reward each

The total reward of rollout i is  r_i = sum_f w_f * f_i  with the weights of params.reward.weights
(a reward with weight 0 is not computed: profiles merge dicts, so a zero switches a reward off).
A reward registered with `applies=` scores only the groups it accepts and gives 0 elsewhere: the
decision rewards score decision groups, the text rewards the others, so one batch can mix both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch

from components.config import RewardConfig
from components.contracts.errors import UserError
from components.contracts.groups import PromptGroup
from components.contracts.naming import NameRegistry
from components.contracts.rollouts import GroupBatch

RewardKind = Literal["sample", "group"]


@dataclass(frozen=True)
class RewardFn:
    name: str
    kind: RewardKind
    fn: Callable
    applies: Callable[[PromptGroup], bool] = lambda group: True  # noqa: E731  (groups it scores; 0 elsewhere)


REWARDS = NameRegistry[RewardFn]("reward")


def is_decision(group: PromptGroup) -> bool:
    """A decision group (answered in one token after a prefix: `components.rewards.decision`)."""
    return group.decision is not None


def is_free_text(group: PromptGroup) -> bool:
    """A group answered in free text (the text rewards' groups)."""
    return group.decision is None


def register_reward(name: str, kind: RewardKind, applies: Callable[[PromptGroup], bool] | None = None) -> Callable[[Callable], Callable]:
    """Register a sample (`kind="sample"`) or group (`kind="group"`) reward under `name`; `applies`:
    the groups it scores (all when None; others get 0)."""

    def decorator(fn: Callable) -> Callable:
        REWARDS.add(name, RewardFn(name, kind, fn, applies or (lambda group: True)))
        return fn

    return decorator


def get_reward(name: str) -> RewardFn:
    return REWARDS.get(name)


class RewardError(UserError, FloatingPointError):
    """A reward function returned NaN/inf or the wrong number of values."""


class RewardInputError(UserError, ValueError):
    """A reward in reward.weights cannot score a group: the group lacks what it needs (valid answers)."""


def compute_rewards(batch: GroupBatch, cfg: RewardConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Total reward (N,) and each reward function's raw values (N,) for a batch of whole groups."""
    n = len(batch.rollouts)
    per_fn: dict[str, torch.Tensor] = {}
    active = {name: weight for name, weight in cfg.weights.items() if weight != 0}
    if not active:
        raise RewardError("reward.weights: every weight is 0; at least one reward must count")
    REWARDS.check(active, where="reward.weights")
    for name in active:
        reward = get_reward(name)
        values = torch.zeros(n, dtype=torch.float64)
        for g, group in enumerate(batch.groups):
            positions = batch.rollouts_of(g)
            rollouts = [batch.rollouts[i] for i in positions]
            if not reward.applies(group):
                scores = [0.0] * len(rollouts)
            elif reward.kind == "sample":
                scores = [reward.fn(r, group, cfg) for r in rollouts]
            else:
                scores = list(reward.fn(rollouts, group, cfg))
            if len(scores) != len(positions):
                raise RewardError(f"reward {name!r} returned {len(scores)} values for {len(positions)} rollouts of group {group.group_id}")
            values[positions] = torch.tensor(scores, dtype=torch.float64)
        if not torch.isfinite(values).all():
            raise RewardError(f"reward {name!r} produced NaN/inf: {values.tolist()}")
        per_fn[name] = values
    total = sum(active[name] * per_fn[name] for name in active)
    return total.float(), per_fn
