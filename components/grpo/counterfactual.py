"""Counterfactual logit pairing (Garg et al. 2019, "Counterfactual Fairness in Text Classification
through Robustness", AIES): the standard non-RL baseline for decision parity (`train.objective`),
and a term of the GRPO loss (`train.decision_pairing`).

No sampling and no reward: for the decision groups of a step (one question, its variants differing
only on the protected axis), the policy's decision log-odds ℓ_v after the answer prefix are
computed with gradients and

    L = mean_groups mean_v |ℓ_v − ℓ̄|  +  β · KL(π_ref ‖ π_θ) at the decision position

is minimised: Garg et al.'s L1 penalty on counterfactual logits (their pairs are here a group's
variants, compared with the group mean) and, since there is no task loss to keep the model's
decisions (their classifier had its labels), the KL to the reference over the whole next-token
distribution after the prefix. Alone (`objective: counterfactual_logit_pairing`, β = `train.beta`)
it is the baseline of the fairness study, at the GRPO arms' data, steps and optimiser. As a term
(`decision_pairing`: weight λ, its own β) it is added to the GRPO loss of the free-text groups in the
same optimizer step, so a consistency recipe holds the decisions with a gradient that does not go
through sampled one-token rewards: those advantages are the centred rewards of a spread of
hundredths of a logit, noisy and sized by the drift, where this loss's gradient is exact.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from components.config import TrainConfig
from components.contracts.errors import UserError
from components.contracts.groups import PromptGroup
from components.generation.sampling import answer_prompt
from components.grpo.decisions import decision_logodds, last_position_logits
from components.grpo.reference import BASE, Reference


@dataclass(frozen=True)
class PairingTerm:
    """λ · (pairing + β KL) on `groups`, this process's share of a step's `total_groups` decision groups."""

    groups: list[PromptGroup]
    total_groups: int
    weight: float = 1.0
    beta: float = 0.0
    micro_groups: int = 1  # whole groups per forward/backward


def pairing_backward(
    trainer_model, model, tokenizer, term: PairingTerm, reference: Reference = BASE, world_size: int = 1, no_sync: bool = False
) -> dict[str, float]:
    """Accumulate the gradient of `term` into the LoRA weights (no optimizer step) and return its
    parts (spread: the pairing term, kl, level: the mean ℓ, tokens), summed over this process's
    groups and divided by `term.total_groups`: summed over processes, the step's means.

    `trainer_model` takes the gradient (the DDP wrapper under torchrun, whose mean over processes the
    loss's factor `world_size` undoes; `no_sync`: leave the all-reduce to a later backward), `model`
    the peft model that gives π_ref through `reference`."""
    if any(g.decision is None for g in term.groups):
        raise ValueError("counterfactual logit pairing: every group must be a decision group (data.decision_groups)")
    tokenizer.padding_side = "left"
    parts = {"spread": 0.0, "kl": 0.0, "level": 0.0, "tokens": 0.0}
    size = max(1, term.micro_groups)
    for chunk in (term.groups[i : i + size] for i in range(0, len(term.groups), size)):
        texts = [answer_prompt(tokenizer, m.text, g.decision.answer_prefix) for g in chunk for m in g.members]
        with trainer_model.no_sync() if no_sync else contextlib.nullcontext():
            logits, enc = last_position_logits(trainer_model, tokenizer, texts)
            log_probs = torch.log_softmax(logits, dim=-1)
            with torch.no_grad(), reference.policy(model):
                ref = torch.log_softmax(last_position_logits(model, tokenizer, texts)[0], dim=-1)
            pairing, start = [], 0
            for g in chunk:
                logodds = decision_logodds(log_probs[start : start + len(g.members)], tokenizer, g.decision)
                start += len(g.members)
                pairing.append((logodds - logodds.mean()).abs().mean())
                parts["level"] += float(logodds.detach().mean()) / term.total_groups
            kl = (ref.exp() * (ref - log_probs)).sum(dim=-1).mean()  # KL(π_ref ‖ π_θ) at the decision position
            spread, kl_part = torch.stack(pairing).sum() / term.total_groups, kl * len(chunk) / term.total_groups
            loss = term.weight * (spread + term.beta * kl_part)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite counterfactual logit pairing loss {loss.item()}")
            (loss * world_size).backward()
        parts["spread"] += float(spread.detach())
        parts["kl"] += float(kl_part.detach())
        parts["tokens"] += float(enc["attention_mask"].sum())
    return parts


class PairingParamsError(UserError, ValueError):
    """train.decision_pairing with a reward that scores decision groups, which the term leaves unsampled."""


def pairing_term_loss(trainer_model, model, tokenizer, groups: list[PromptGroup], cfg: TrainConfig, reference: Reference, world_size: int):
    """The `extra_loss` of `policy_update` for `train.decision_pairing` on this process's decision
    `groups` of a step: it runs the term's backward and returns its metrics under `decision/`."""
    dp = cfg.decision_pairing
    term = PairingTerm(groups, cfg.decision_groups_per_step or len(groups), dp.weight, dp.beta, cfg.groups_per_micro_batch)

    def extra_loss(no_sync: bool) -> dict[str, float]:
        parts = pairing_backward(trainer_model, model, tokenizer, term, reference, world_size, no_sync)
        return {"decision/spread_mean": parts["spread"], "decision/logodds_mean": parts["level"],
                "decision/kl": parts["kl"], "decision/pairing_loss": dp.weight * (parts["spread"] + dp.beta * parts["kl"])}  # fmt: skip

    return extra_loss


def check_pairing_rewards(weights: dict[str, float], scores_decisions: dict[str, bool], decision_pairing_weight: float) -> None:
    """With the pairing term the decision groups are never sampled: a reward that scores only them
    (`scores_decisions[name]`) would weigh nothing, so its weight must be 0."""
    idle = sorted(name for name, w in weights.items() if w != 0 and scores_decisions.get(name, False))
    if decision_pairing_weight > 0 and idle:
        raise PairingParamsError(
            f"reward.weights: {idle} score decision groups, which train.decision_pairing trains by their log-odds "
            "without sampling them; set those weights to 0"
        )


def clp_update(
    model, optimizer, scheduler, groups: list[PromptGroup], tokenizer, cfg: TrainConfig, reference: Reference = BASE
) -> dict[str, float]:
    """One optimizer step of counterfactual logit pairing alone on `groups` (decision groups only);
    micro-batches of `groups_per_micro_batch` groups accumulate into one step."""
    if any(g.decision is None for g in groups):
        raise ValueError(
            "train.objective counterfactual_logit_pairing: every training group must be a decision group (data.decision_groups)"
        )
    model.train()
    optimizer.zero_grad(set_to_none=True)
    term = PairingTerm(groups, len(groups), weight=1.0, beta=cfg.beta, micro_groups=cfg.groups_per_micro_batch)
    parts = pairing_backward(model, model, tokenizer, term, reference)
    trainable = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm))
    if not math.isfinite(grad_norm):
        raise FloatingPointError("non-finite gradient norm in counterfactual logit pairing; no checkpoint written")
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return {
        "loss": parts["spread"] + cfg.beta * parts["kl"], "kl": parts["kl"], "reward_mean": -parts["spread"],
        "decision/spread_mean": parts["spread"], "decision/logodds_mean": parts["level"], "grad_norm": grad_norm,
        "lr": optimizer.param_groups[0]["lr"], "samples": float(sum(len(g.members) for g in groups)), "tokens": parts["tokens"],
    }  # fmt: skip
