"""Rollouts of whole groups and the per-group quantities computed from them.

A group is all K samples of every variant of one question (consistency) or the K samples of one
prompt (diversity); `GroupBatch.index` is the explicit group index of every sample.
"""

from __future__ import annotations

import torch

from components.config import AdvantageConfig
from components.contracts.groups import PromptGroup
from components.contracts.rollouts import GroupBatch, Rollout
from components.generation.sampling import SamplingConfig
from components.grpo.decisions import decision_rollouts
from components.grpo.reference import Reference
from components.grpo.rollout_engines import RolloutEngine
from components.grpo.semantic import get_clusterer, normalized_semantic_entropy


def collect_rollouts(
    engine: RolloutEngine,
    groups: list[PromptGroup],
    sampling: SamplingConfig,
    policy: tuple | None = None,
    batch_size: int = 48,
    reference: Reference | None = None,
) -> GroupBatch:
    """K samples of every variant of every group, in one batched generation (the engine's log-probs
    kept when it records them: they are the behaviour policy of importance sampling). Decision
    groups are sampled from `policy` = (model, tokenizer), the live policy (`components.grpo.decisions`),
    with their log-odds under `reference` too when given."""
    prompts, owners, decided = [], [], []
    for g, group in enumerate(groups):
        if group.decision is not None:
            decided.append((g, group))
            continue
        for member in group.members:
            prompts.append(member.text)
            owners.append((g, group, member))
    if decided and policy is None:
        raise ValueError("decision groups need the live policy (model, tokenizer) to be sampled")
    completions = engine.generate(prompts, sampling) if prompts else []
    rollouts = decision_rollouts(*policy, decided, sampling, batch_size, reference) if decided else []
    rollouts += [
        Rollout.of(
            g,
            group,
            member,
            completion=c.text,
            prompt_ids=c.prompt_ids,
            completion_ids=c.completion_ids,
            truncated=c.truncated,
            behaviour_logprobs=tuple(c.logprobs) if engine.records_logprobs else (),
        )
        for (g, group, member), per_prompt in zip(owners, completions)
        for c in per_prompt
    ]
    rollouts.sort(key=lambda r: r.group_index)  # the batch's order: group by group
    return GroupBatch(groups=groups, rollouts=rollouts)


def group_uncertainty(batch: GroupBatch, cfg: AdvantageConfig) -> torch.Tensor:
    """Per-sample SE / log G of the sample's group over meaning clusters (components.grpo.semantic)."""
    cluster = get_clusterer(cfg.clustering)
    out = torch.zeros(len(batch.rollouts), dtype=torch.float64)
    for g, group in enumerate(batch.groups):
        positions = batch.rollouts_of(g)
        clusters = cluster([batch.rollouts[i] for i in positions], group, cfg)
        out[positions] = normalized_semantic_entropy(clusters)
    return out


def rollout_table(batch: GroupBatch, rewards: torch.Tensor, advantages: torch.Tensor, step: int) -> list[dict]:
    """Rows for a table of sampled rollouts (logged every `train.log_rollouts_every` steps)."""
    return [
        {
            "step": step,
            "group_id": r.group_id,
            "variant_id": r.variant_id,
            "prompt": r.prompt,
            "completion": r.completion,
            "tokens": len(r.completion_ids),
            "truncated": r.truncated,
            "reward": float(rewards[i]),
            "advantage": float(advantages[i]),
        }
        for i, r in enumerate(batch.rollouts)
    ]
