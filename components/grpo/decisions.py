"""Rollouts of decision groups (`PromptGroup.decision`): one token after the answer prefix.

A decision group's answer is the next token after its answer prefix ('... my answer would be "'),
so a rollout is one prefill of the live policy per variant, no decoding loop: from the
last position's logits z,

    ℓ_v = log Σ_{w ∈ yes} softmax(z)_w − log Σ_{w ∈ no} softmax(z)_w     (the decision's log-odds)
    o_{v,k} ~ softmax(z / T),  k = 1..K                                    (the K sampled answers)

ℓ_v is what the evaluation reads for the same prompt (`components.evaluation.fairness`), kept on
every sample (`Rollout.decision_logodds`) for rewards that need the policy's own decision
(`components.rewards.decision`). The yes/no words are those the tokenizer writes as one token.
Always the trainer's own model (also with vLLM rollouts for the free-text groups): a prefill of a
few hundred prompts costs less than a weight sync.
"""

from __future__ import annotations

import torch

from components.contracts.groups import DecisionSpec, PromptGroup
from components.contracts.rollouts import Rollout
from components.generation.sampling import SamplingConfig, answer_prompt, sample_next, single_token_ids
from components.grpo.reference import Reference


def last_position_logits(model, tokenizer, texts: list[str]) -> tuple[torch.Tensor, dict]:
    """fp32 logits of each (left-padded) prompt's last position, and the encoding they came from."""
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(next(model.parameters()).device)
    positions = (enc["attention_mask"].cumsum(dim=1) - 1).clamp(min=0)
    return model(**enc, position_ids=positions, logits_to_keep=1).logits[:, -1].float(), enc


def decision_logodds(log_probs: torch.Tensor, tokenizer, spec: DecisionSpec) -> torch.Tensor:
    """ℓ = log Σ_yes p − log Σ_no p of each row of `log_probs` (next-token log-probabilities)."""
    yes = single_token_ids(tokenizer, tuple(spec.yes_words), spec.benchmark)
    no = single_token_ids(tokenizer, tuple(spec.no_words), spec.benchmark)
    return torch.logsumexp(log_probs[..., yes], -1) - torch.logsumexp(log_probs[..., no], -1)


@torch.no_grad()
def decision_rollouts(
    model, tokenizer, groups: list[tuple[int, PromptGroup]], sampling: SamplingConfig, batch_size: int, reference: Reference | None = None
) -> list[Rollout]:
    """K one-token samples of every variant of every (batch index, decision group), with ℓ_v (and,
    given `reference`, ℓ_v under π_ref: `Rollout.reference_logodds`)."""
    owners = [(g, group, member) for g, group in groups for member in group.members]
    texts = [answer_prompt(tokenizer, m.text, group.decision.answer_prefix) for _, group, m in owners]
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    rollouts: list[Rollout] = []
    try:
        for start in range(0, len(texts), max(1, batch_size)):
            logits, enc = last_position_logits(model, tokenizer, texts[start : start + batch_size])
            log_probs = torch.log_softmax(logits, dim=-1)
            ref_log_probs = None
            if reference is not None:
                with reference.policy(model):
                    ref_log_probs = torch.log_softmax(last_position_logits(model, tokenizer, texts[start : start + batch_size])[0], dim=-1)
            generator = torch.Generator(device=logits.device).manual_seed(sampling.seed + start)
            chosen, _ = sample_next(logits.repeat_interleave(sampling.n, dim=0), sampling.temperature, sampling.top_p, generator)
            chosen = chosen.view(-1, sampling.n).tolist()
            for row, (g, group, member) in enumerate(owners[start : start + batch_size]):
                logodds = float(decision_logodds(log_probs[row], tokenizer, group.decision))
                ref = None if ref_log_probs is None else float(decision_logodds(ref_log_probs[row], tokenizer, group.decision))
                ids = tuple(t for t, m in zip(enc["input_ids"][row].tolist(), enc["attention_mask"][row].tolist()) if m)
                rollouts += [
                    Rollout.of(
                        g,
                        group,
                        member,
                        completion=tokenizer.decode([token]).strip(),
                        prompt_ids=ids,
                        completion_ids=(token,),
                        truncated=False,
                        decision_logodds=logodds,
                        reference_logodds=ref,
                    )  # fmt: skip
                    for token in chosen[row]
                ]
    finally:
        if was_training:
            model.train()
    return rollouts


def decision_spreads(rollouts: list[Rollout], n_groups: int) -> list[tuple[float, float]]:
    """(mean_v |ℓ_v − ℓ̄|, ℓ̄) of every decision group in a batch: how far its variants' decisions
    are apart (what decision_parity lowers) and where they sit (a drift of ℓ̄ is a drift to yes/no)."""
    out = []
    for g in range(n_groups):
        values = {r.variant_id: r.decision_logodds for r in rollouts if r.group_index == g and r.decision_logodds is not None}
        if values:
            mean = sum(values.values()) / len(values)
            out.append((sum(abs(v - mean) for v in values.values()) / len(values), mean))
    return out
