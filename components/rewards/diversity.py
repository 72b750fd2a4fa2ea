"""GAPO frequency-aware reward (group-aware policy optimization, arXiv:2511.12596).

For the G samples of one diversity prompt with valid answer set V (L = |V|), answers mapped onto V
by the group's normaliser:

    f_v = (number of samples answering v) / (number of valid samples)
    R_i = 1 - |f(o_i) - 1/L|     if o_i gives a valid answer
    R_i = -1                     otherwise

A spread that covers V uniformly gives every sample 1; all G samples giving the same answer gives
1 - (1 - 1/L) = 1/L each. The reward of a sample depends on the whole group: a group reward.
"""

from __future__ import annotations

from collections import Counter

from components.config import RewardConfig
from components.contracts.groups import PromptGroup
from components.contracts.rollouts import Rollout
from components.data.normalizers import get_normalizer
from components.rewards.registry import RewardInputError, register_reward

INVALID_REWARD = -1.0  # fixed by the GAPO formula, not a tunable knob


def group_answers(rollouts: list[Rollout], group: PromptGroup) -> list[str | None]:
    """Each completion mapped onto the group's valid set (None: no valid answer)."""
    if not group.valid_answers or not group.answer_normalizer:
        raise RewardInputError(f"group {group.group_id}: frequency_aware needs valid_answers and answer_normalizer")
    normalize = get_normalizer(group.answer_normalizer)
    return [normalize(r.completion, group.valid_answers) for r in rollouts]


@register_reward("frequency_aware", kind="group")
def frequency_aware(rollouts: list[Rollout], group: PromptGroup, cfg: RewardConfig) -> list[float]:
    """R_i = 1 - |f(o_i) - 1/L| for a valid answer, -1 for an invalid one."""
    answers = group_answers(rollouts, group)
    counts = Counter(a for a in answers if a is not None)
    n_valid = sum(counts.values())
    uniform = 1.0 / len(group.valid_answers)
    return [INVALID_REWARD if a is None else 1.0 - abs(counts[a] / n_valid - uniform) for a in answers]


@register_reward("validity", kind="sample")
def validity(rollout: Rollout, group: PromptGroup, cfg: RewardConfig) -> float:
    """R_i = 1 if o_i gives an answer in V, else 0: per-sample GRPO, the baseline GAPO beats
    (arXiv:2511.12596); it pays every valid answer alike, however often the group repeats it."""
    return 0.0 if group_answers([rollout], group)[0] is None else 1.0


@register_reward("correctness", kind="sample")
def correctness(rollout: Rollout, group: PromptGroup, cfg: RewardConfig) -> float:
    """R_i = 1 if o_i's parsed answer is the task's one right answer, else 0 (SEED-GRPO's reasoning
    reward, arXiv:2505.12346): `validity` on a task whose valid set has exactly one answer, parsed
    by the group's normaliser (`final_integer` for the arithmetic tasks)."""
    if not group.valid_answers or len(group.valid_answers) != 1:
        raise RewardInputError(
            f"group {group.group_id}: correctness needs exactly one valid answer "
            f"(has {len(group.valid_answers or [])}); use validity or frequency_aware for sets"
        )
    return validity(rollout, group, cfg)
