"""Rollouts: the seam between sampling (grpo.rollouts), rewards, advantages and the update.

A `Rollout` is one sampled completion of one prompt variant; a `GroupBatch` holds the rollouts of
whole groups with the explicit group index of each rollout (verl's `index`), so rewards and
advantages never rely on positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from components.contracts.groups import Member, PromptGroup


@dataclass(frozen=True)
class Rollout:
    """One sampled completion of one prompt variant of one group."""

    group_index: int  # position of the group in the batch: the explicit group index
    group_id: str
    variant_id: str
    prompt: str
    completion: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    truncated: bool
    # log p of each completion token under the engine that sampled it (vLLM rollouts; empty otherwise):
    # the behaviour policy of truncated importance sampling
    behaviour_logprobs: tuple[float, ...] = ()
    # decision groups: the policy's log p(yes words) - log p(no words) after the answer prefix at
    # rollout time (one per variant, the same for its K samples); None for free-text answers
    decision_logodds: float | None = None
    # the same log-odds under the KL reference (train.reference), when a reward anchors to it
    reference_logodds: float | None = None

    @classmethod
    def of(cls, group_index: int, group: PromptGroup, member: Member, **sample) -> "Rollout":
        """A sample of `member`, a variant of `group` (at `group_index` in the batch)."""
        return cls(group_index=group_index, group_id=group.group_id, variant_id=member.variant_id, prompt=member.text, **sample)


@dataclass
class GroupBatch:
    """Rollouts of whole groups (a group is never split across micro-batches or steps)."""

    groups: list[PromptGroup]
    rollouts: list[Rollout]
    index: torch.Tensor = field(init=False)  # (N,) long: group_index of each rollout

    def __post_init__(self) -> None:
        self.index = torch.tensor([r.group_index for r in self.rollouts], dtype=torch.long)

    def rollouts_of(self, group_index: int) -> list[int]:
        """Positions of the rollouts of one group."""
        return [i for i, r in enumerate(self.rollouts) if r.group_index == group_index]
