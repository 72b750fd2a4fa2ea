"""Counterfactual logit pairing (Garg et al. 2019, "Counterfactual Fairness in Text Classification
through Robustness", AIES): the standard non-RL baseline for decision parity (`train.objective`).

No sampling and no reward: every step, for the decision groups of the batch (one question, its
variants differing only on the protected axis), the policy's decision log-odds ℓ_v after the
answer prefix are computed with gradients and

    L = mean_groups mean_v |ℓ_v − ℓ̄|  +  β · KL(π_ref ‖ π_θ) at the decision position

is minimised: Garg et al.'s L1 penalty on counterfactual logits (their pairs are here a group's
variants, compared with the group mean) and, since there is no task loss to keep the model's
decisions (their classifier had its labels), the KL to the LoRA-disabled reference over the whole
next-token distribution after the prefix (`train.beta`). Same data, steps and optimiser as the
GRPO arms, so the two can be compared at equal budget.
"""

from __future__ import annotations

import math

import torch

from components.config import TrainConfig
from components.contracts.groups import PromptGroup
from components.generation.sampling import answer_prompt
from components.grpo.decisions import decision_logodds, last_position_logits
from components.grpo.reference import BASE, Reference


def clp_update(
    model, optimizer, scheduler, groups: list[PromptGroup], tokenizer, cfg: TrainConfig, reference: Reference = BASE
) -> dict[str, float]:
    """One optimizer step of counterfactual logit pairing on `groups` (decision groups only);
    micro-batches of `groups_per_micro_batch` groups accumulate into one step."""
    if any(g.decision is None for g in groups):
        raise ValueError(
            "train.objective counterfactual_logit_pairing: every training group must be a decision group (data.decision_groups)"
        )
    tokenizer.padding_side = "left"
    model.train()
    optimizer.zero_grad(set_to_none=True)
    totals = {"pairing": 0.0, "kl": 0.0, "spread": 0.0, "level": 0.0, "tokens": 0.0}
    chunks = [groups[i : i + max(1, cfg.groups_per_micro_batch)] for i in range(0, len(groups), max(1, cfg.groups_per_micro_batch))]
    for chunk in chunks:
        texts = [answer_prompt(tokenizer, m.text, g.decision.answer_prefix) for g in chunk for m in g.members]
        logits, enc = last_position_logits(model, tokenizer, texts)
        log_probs = torch.log_softmax(logits, dim=-1)
        with torch.no_grad(), reference.policy(model):
            ref = torch.log_softmax(last_position_logits(model, tokenizer, texts)[0], dim=-1)
        pairing, start = [], 0
        for g in chunk:
            logodds = decision_logodds(log_probs[start : start + len(g.members)], tokenizer, g.decision)
            start += len(g.members)
            pairing.append((logodds - logodds.mean()).abs().mean())
            totals["spread"] += float(pairing[-1].detach()) / len(groups)
            totals["level"] += float(logodds.detach().mean()) / len(groups)
        kl = (ref.exp() * (ref - log_probs)).sum(dim=-1).mean()  # KL(π_ref ‖ π_θ) at the decision position
        loss = (torch.stack(pairing).sum() / len(groups)) + cfg.beta * kl * len(chunk) / len(groups)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite counterfactual logit pairing loss {loss.item()}")
        loss.backward()
        totals["pairing"] += float(torch.stack(pairing).detach().sum()) / len(groups)
        totals["kl"] += float(kl.detach()) * len(chunk) / len(groups)
        totals["tokens"] += float(enc["attention_mask"].sum())
    trainable = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm))
    if not math.isfinite(grad_norm):
        raise FloatingPointError("non-finite gradient norm in counterfactual logit pairing; no checkpoint written")
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return {
        "loss": totals["pairing"] + cfg.beta * totals["kl"], "kl": totals["kl"], "reward_mean": -totals["spread"],
        "decision/spread_mean": totals["spread"], "decision/logodds_mean": totals["level"], "grad_norm": grad_norm,
        "lr": optimizer.param_groups[0]["lr"], "samples": float(sum(len(g.members) for g in groups)), "tokens": totals["tokens"],
    }  # fmt: skip
