"""Meaning clusters of a group's samples and their discrete semantic entropy.

Semantic entropy (Kuhn, Gal & Farquhar 2023; used by SEED-GRPO, Chen et al. 2025, arXiv:2505.12346)
over the meaning clusters C_1..C_K of the G samples of a group, in its discrete (count) form:

    p_k = |C_k| / G,    SE = -sum_k p_k log p_k,    SE_norm = SE / log G  in [0, 1]

Clusterers are registered by name (`train.advantage.clustering`):

- `answer`: by *normalised final answer*: for a group with a valid set, the answer its normaliser
  extracts (samples without a valid answer are clustered by their normalised text); for other
  groups, the normalised text itself (lower-cased words).
- `embedding`: all-MiniLM-L6-v2 sentence embeddings (`components.embeddings`); a sample joins the
  first cluster whose leader has cosine similarity >= `similarity_threshold`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Hashable, Sequence

from components.config import AdvantageConfig
from components.contracts.errors import UserError
from components.contracts.groups import PromptGroup
from components.contracts.naming import NameRegistry
from components.contracts.rollouts import Rollout
from components.rewards.diversity import group_answers
from components.rewards.entropy import words

Clusterer = Callable[[Sequence[Rollout], PromptGroup, AdvantageConfig], list[Hashable]]
CLUSTERERS = NameRegistry[Clusterer]("clusterer")
register_clusterer = CLUSTERERS.register


def get_clusterer(name: str) -> Clusterer:
    return CLUSTERERS.get(name)


@register_clusterer("answer")
def answer_clusters(rollouts: Sequence[Rollout], group: PromptGroup, cfg: AdvantageConfig | None = None) -> list[Hashable]:
    """A meaning-cluster key per rollout: the normalised answer, else the normalised text."""
    has_valid_set = bool(group.valid_answers and group.answer_normalizer)
    answers = group_answers(list(rollouts), group) if has_valid_set else [None] * len(rollouts)
    return [("answer", answer) if answer is not None else ("text", " ".join(words(r.completion))) for r, answer in zip(rollouts, answers)]


class ClusteringError(UserError, ValueError):
    """A clusterer asked for groups it cannot give meanings to."""


def check_answer_clustering(groups: Sequence[PromptGroup], cfg: AdvantageConfig) -> None:
    """An uncertainty-scaled estimator (seed_grpo) with `clustering: answer` needs a valid set (and
    its normaliser) in every group.

    On free text the `answer` clusterer falls back to exact text; sampled texts almost never repeat,
    so SE / log G would be ~1 for every group and the scaling a constant factor: refused, naming the
    first such group.
    """
    from components.grpo.advantages import uses_uncertainty

    if cfg.clustering != "answer" or not uses_uncertainty(cfg.estimator):
        return
    free = [g.group_id for g in groups if not (g.valid_answers and g.answer_normalizer)]
    if free:
        more = f" (and {len(free) - 1} more)" if len(free) > 1 else ""
        raise ClusteringError(
            f"group {free[0]}{more}: train.advantage.clustering 'answer' needs valid_answers and an answer_normalizer; "
            "free text would cluster by exact text (SE / log G ~ 1 for every group, a constant scaling): "
            "use clustering: embedding"
        )


@register_clusterer("embedding")
def embedding_clusters(rollouts: Sequence[Rollout], group: PromptGroup, cfg: AdvantageConfig) -> list[Hashable]:
    """A cluster id per rollout from sentence-embedding similarity (threshold from params)."""
    from components.embeddings import embed, threshold_clusters

    return threshold_clusters(embed([r.completion for r in rollouts]), cfg.similarity_threshold)


def semantic_entropy(clusters: Sequence[Hashable]) -> float:
    """SE = -sum_k p_k log p_k with p_k the share of samples in cluster k (nats)."""
    g = len(clusters)
    if g == 0:
        raise ValueError("semantic entropy of an empty group")
    return math.fsum(-(c / g) * math.log(c / g) for c in Counter(clusters).values()) + 0.0


def normalized_semantic_entropy(clusters: Sequence[Hashable]) -> float:
    """SE / log G (0 for a single sample)."""
    g = len(clusters)
    return semantic_entropy(clusters) / math.log(g) if g > 1 else 0.0
