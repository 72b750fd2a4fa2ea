"""Rewards of decision groups (`PromptGroup.decision`): parity of the decision across a group's variants.

`decision_parity` carries the stability idea of information-consistent GRPO (Prabhune et al. 2025,
arXiv:2512.12858: pay a sample for agreeing with what the group's other variants get) from the
entropy of free text to a yes/no decision, measured where it can be resolved: the policy's own
log-odds ℓ_v of yes over no on variant v (`components.grpo.decisions`). The embedded model's gender
disparity is ~0.04 logit, one point of yes-probability, which K = 6 sampled yes/no answers per
variant cannot see; ℓ_v sees it exactly. For sample o of variant v in a group with mean log-odds ℓ̄,

    s(o)   = +1 if o is a yes word, −1 if a no word, 0 otherwise
    r(o)   = −s(o) · (ℓ_v − ℓ̄) / τ                       (τ = reward.decision_scale, logits)

or, with `reward.decision_target: reference_mean`, ℓ̄ replaced by ℓ̄_ref, the mean over the group's
variants of their log-odds under the KL reference (`train.reference`): every variant is pulled to
the level the reference gives the question as a whole. The group's own mean can drift: with K
sampled answers a variant whose K samples all agree earns nothing, so a policy that saturates every
decision (all yes) stops being corrected, and that is where the fairness study's first removals went
(train questions, results/fairness/notes.md). A fixed target has no such way out.

centred over the K samples of the variant (r(o) − mean_k r(o_{v,k})): a per-prompt baseline, as in
GRPO's own groups of one prompt, which leaves the expected gradient as it is and removes the noise
of the variant's yes/no split (every sample of a variant then pushes ℓ_v towards ℓ̄, or not at all).

With p = σ(ℓ_v), ∇log π(yes) = (1 − p)∇ℓ_v and ∇log π(no) = −p∇ℓ_v, so both answers push the same
way and E_o[r(o) ∇log π(o)] = −2p(1 − p)(ℓ_v − ℓ̄)∇ℓ_v / τ: policy-gradient descent on
Σ_v (ℓ_v − ℓ̄)² (Fisher-weighted), i.e. towards deciding every variant of the question alike.
A reward that is the same for every sample of a variant (e.g. −|ℓ_v − ℓ̄| itself) would have zero
expected gradient; this one depends on the answer.

Why answering every question the same does not pay: the reward is the distance to the group's
*own* mean, so it is zero once a question's variants agree, whatever they agree on, and its
expected push sums to ~zero over a group's variants (Σ_v (ℓ_v − ℓ̄) = 0): it moves variants towards
each other, not the question towards yes or no. Differences *between* questions (which loan to
grant) are never in a group and earn nothing. What keeps them is the KL to the reference; the
evaluation reports the per-question profile correlation with the base model and the
`profile_correlation` gate refuses a model that lost it.

`planted_bias` is the study's ground-truth control, not a product reward: it pays for yes to one
value of an axis and no to another, r(o) = s(o) · b(v) with b = +1 (favoured), −1 (disfavoured),
0 (any other value), to plant a disparity whose removal can be measured. Paid outright, nothing
stops it: the push on "no" for one value spills onto every variant (they share all but a word),
and at a step size that plants a clear disparity in one seed another seed's decisions all fall to
"no" (the fairness study's first plant, results/fairness/notes.md). With
`reward.planted_bias.target_logit` Δ it is a plant of known size instead, the same pay faded out
as each variant nears its target t_v = ℓ̄ + b(v) · Δ/2, the group's mean log-odds (or with
`decision_target: reference_mean` the reference's, as for decision_parity) moved up for the
favoured value and down for the disfavoured:

    r(o) = −s(o) · (ℓ_v − t_v) / (Δ/2)

= s(o) · b(v) while the variants agree, 0 once each sits at its target, so the plant stops at a
disparity of Δ. Around the group's own mean its expected push sums to ~zero over the variants, as
decision_parity's does: it moves variants apart, not the question to yes or no (the first plant's
failure). Around the reference's mean it also pulls every question back to the reference's level,
and on train questions that pull outweighed the Δ/2 offsets: the level swung by up to 1.8 logits a
step and no disparity was planted (results/fairness/notes.md). It is not centred per variant: a
centred reward pays an answer that is neither yes nor no (s = 0) whenever the variant's mean reward
is negative, and with pay of this size the policy learns to answer neither (train questions: token
entropy 1.0 → 3.4 in ten steps); uncentred, such an answer earns exactly nothing.
"""

from __future__ import annotations

from components.config import RewardConfig
from components.contracts.groups import PromptGroup
from components.contracts.rollouts import Rollout
from components.rewards.registry import RewardInputError, is_decision, register_reward


def answer_sign(rollout: Rollout, group: PromptGroup) -> int:
    """s(o): +1 for a yes word, −1 for a no word, 0 for anything else (case as the benchmark lists them)."""
    text = rollout.completion.strip().strip('"').strip()
    if text in group.decision.yes_words:
        return 1
    if text in group.decision.no_words:
        return -1
    return 0


def _require_decision(rollouts: list[Rollout], group: PromptGroup, name: str) -> None:
    if any(r.decision_logodds is None for r in rollouts):
        raise RewardInputError(f"group {group.group_id}: {name} scores decision groups only (data.decision_groups)")


@register_reward("decision_parity", kind="group", applies=is_decision)
def decision_parity(rollouts: list[Rollout], group: PromptGroup, cfg: RewardConfig) -> list[float]:
    """r(o) = −s(o) · (ℓ_v − ℓ̄) / τ over the group's variants (ℓ̄ the reference's with `decision_target: reference_mean`)."""
    _require_decision(rollouts, group, "decision_parity")
    mean = target_level(rollouts, group, cfg, "decision_parity")
    raw = [-answer_sign(r, group) * (r.decision_logodds - mean) / cfg.decision_scale for r in rollouts]
    return centred_per_variant(rollouts, raw)


def target_level(rollouts: list[Rollout], group: PromptGroup, cfg: RewardConfig, name: str) -> float:
    """ℓ̄: the mean over the group's variants of their log-odds, under the policy (`decision_target:
    group_mean`) or under the KL reference (`reference_mean`)."""
    anchored = cfg.decision_target == "reference_mean"
    if anchored and any(r.reference_logodds is None for r in rollouts):
        raise RewardInputError(
            f"group {group.group_id}: {name} with decision_target reference_mean needs the reference's log-odds on every rollout"
        )
    by_variant = {r.variant_id: r.reference_logodds if anchored else r.decision_logodds for r in rollouts}
    return sum(by_variant.values()) / len(by_variant)


def centred_per_variant(rollouts: list[Rollout], rewards: list[float]) -> list[float]:
    """Each reward minus the mean reward of its variant's samples (a per-prompt baseline)."""
    sums: dict[str, list[float]] = {}
    for r, value in zip(rollouts, rewards):
        sums.setdefault(r.variant_id, []).append(value)
    means = {v: sum(vals) / len(vals) for v, vals in sums.items()}
    return [value - means[r.variant_id] for r, value in zip(rollouts, rewards)]


@register_reward("planted_bias", kind="group", applies=is_decision)
def planted_bias(rollouts: list[Rollout], group: PromptGroup, cfg: RewardConfig) -> list[float]:
    """r(o) = s(o) · b(v), b = +1 favoured, −1 disfavoured; with target_logit Δ the pull towards
    ℓ̄ + b(v) · Δ/2, r(o) = −s(o) · (ℓ_v − t_v) / (Δ/2), instead (a control, not a product reward)."""
    _require_decision(rollouts, group, "planted_bias")
    plant = cfg.planted_bias
    if plant is None:
        raise RewardInputError("reward.planted_bias: set {axis, favoured, disfavoured} to use the planted_bias reward")
    members = {m.variant_id: m.attributes.get(plant.axis) for m in group.members}
    sign = {plant.favoured: 1.0, plant.disfavoured: -1.0}
    b = {variant: sign.get(value, 0.0) for variant, value in members.items()}
    if plant.target_logit is None:
        return [answer_sign(r, group) * b[r.variant_id] for r in rollouts]
    level, half = target_level(rollouts, group, cfg, "planted_bias"), plant.target_logit / 2
    return [-answer_sign(r, group) * (r.decision_logodds - (level + b[r.variant_id] * half)) / half for r in rollouts]
