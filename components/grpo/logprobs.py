"""Per-token log-probabilities of completions under a causal LM.

Layout (as TRL's GRPOTrainer): prompts left-padded to P, completions right-padded to C, joined, so
every completion starts at column P. Only the last C + 1 positions get logits (`logits_to_keep`),
which skips the vocabulary projection of every prompt token. Position ids follow the attention
mask, matching what `generate` used when the completion was sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import torch

from components.contracts.rollouts import Rollout


@dataclass
class PackedBatch:
    input_ids: torch.Tensor  # (B, P + C)
    attention_mask: torch.Tensor  # (B, P + C)
    position_ids: torch.Tensor  # (B, P + C)
    completion_ids: torch.Tensor  # (B, C)
    completion_mask: torch.Tensor  # (B, C) bool

    def to(self, device: torch.device) -> PackedBatch:
        return _moved(self, device)


def _moved(batch, device: torch.device):
    """A copy of a batch dataclass with every tensor on `device` (no copy where it already is)."""
    return replace(batch, **{f.name: getattr(batch, f.name).to(device) for f in fields(batch)})


def _pad_completions(rollouts: Sequence[Rollout], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Completions right-padded to the longest: ids (B, C) and mask (B, C) bool."""
    width = max(len(r.completion_ids) for r in rollouts)
    completion = torch.full((len(rollouts), width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(rollouts), width), dtype=torch.bool)
    for i, r in enumerate(rollouts):
        completion[i, : len(r.completion_ids)] = torch.tensor(r.completion_ids)
        completion_mask[i, : len(r.completion_ids)] = True
    return completion, completion_mask


def pack(rollouts: Sequence[Rollout], pad_id: int) -> PackedBatch:
    prompt_width = max(len(r.prompt_ids) for r in rollouts)
    b = len(rollouts)
    prompt = torch.full((b, prompt_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, prompt_width), dtype=torch.long)
    for i, r in enumerate(rollouts):
        if r.prompt_ids:
            prompt[i, prompt_width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            prompt_mask[i, prompt_width - len(r.prompt_ids) :] = 1
    completion, completion_mask = _pad_completions(rollouts, pad_id)
    attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    return PackedBatch(torch.cat([prompt, completion], dim=1), attention, positions, completion, completion_mask)


@dataclass
class TokenStats:
    logp: torch.Tensor  # (B, C) log pi(o_t | q, o_<t), differentiable
    entropy: torch.Tensor | None  # (B, C) entropy of the sampling distribution at t (no grad)


def token_stats(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool) -> TokenStats:
    """From logits (B, C, V) predicting targets (B, C): log-probs under softmax(z / T) and, if asked,
    the entropy H_t = logZ_t - sum_v p_v z_v of that distribution."""
    logits = logits.float() / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.exp(logits - log_z.unsqueeze(-1))
            entropy = log_z - (probs * logits).sum(-1)
    return TokenStats(logp, entropy)


def completion_logprobs(model, batch: PackedBatch, temperature: float = 1.0, with_entropy: bool = False) -> TokenStats:
    """log pi(o_t | q, o_<t) for every completion position, shape (B, C), and optionally
    the token entropy H_t = logZ_t - sum_v p_v z_v of the same distribution.

    Logits are divided by the sampling temperature, so the log-probs are those of the distribution
    the completions were drawn from (as TRL does).
    """
    width = batch.completion_ids.shape[1]
    logits = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=width + 1,
    ).logits[:, :-1]
    return token_stats(logits, batch.completion_ids, temperature, with_entropy)


# ---- prompt-sharing layout -------------------------------------------------------------------
# The K samples of a prompt share it: the prompt goes through the model once (with gradients, as
# LoRA changes its keys and values), its KV cache is gathered to the K completion rows, and only
# the completions are run on top. Same log-probs as the packed layout, fewer FLOPs: a prompt of
# P tokens costs P instead of K * P token passes, for the policy and for the reference.


@dataclass
class SharedPromptBatch:
    prompt_ids: torch.Tensor  # (U, P) unique prompts, left-padded
    prompt_mask: torch.Tensor  # (U, P)
    prompt_of: torch.Tensor  # (B,) row -> unique prompt
    completion_ids: torch.Tensor  # (B, C) right-padded
    completion_mask: torch.Tensor  # (B, C) bool

    def to(self, device: torch.device) -> SharedPromptBatch:
        return _moved(self, device)


def pack_shared(rollouts: Sequence[Rollout], pad_id: int) -> SharedPromptBatch:
    unique: dict[tuple[int, ...], int] = {}
    prompt_of = [unique.setdefault(r.prompt_ids, len(unique)) for r in rollouts]
    prompts = list(unique)
    if any(not p for p in prompts):
        raise ValueError("prompt sharing needs a non-empty prompt for every rollout")
    width = max(len(p) for p in prompts)
    prompt_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        prompt_ids[i, width - len(p) :] = torch.tensor(p)
        prompt_mask[i, width - len(p) :] = 1
    completion, completion_mask = _pad_completions(rollouts, pad_id)
    return SharedPromptBatch(prompt_ids, prompt_mask, torch.tensor(prompt_of), completion, completion_mask)


def shared_prompt_logprobs(model, batch: SharedPromptBatch, temperature: float = 1.0, with_entropy: bool = False) -> TokenStats:
    """Same result as `completion_logprobs(model, pack(...))`, computing each prompt once."""
    from transformers import DynamicCache

    cache = DynamicCache()
    prompt_positions = (batch.prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
    first = model(
        input_ids=batch.prompt_ids,
        attention_mask=batch.prompt_mask,
        position_ids=prompt_positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    cache = first.past_key_values
    cache.batch_select_indices(batch.prompt_of)
    mask = torch.cat([batch.prompt_mask[batch.prompt_of], batch.completion_mask.long()], dim=1)
    prompt_len = batch.prompt_mask.sum(dim=1)[batch.prompt_of]
    width = batch.completion_ids.shape[1]
    positions = prompt_len.unsqueeze(1) + torch.arange(width, device=prompt_len.device).unsqueeze(0)
    rest = (
        model(
            input_ids=batch.completion_ids[:, :-1] if width > 1 else batch.completion_ids[:, :0],
            attention_mask=mask[:, :-1],
            position_ids=positions[:, :-1],
            past_key_values=cache,
            use_cache=True,
        )
        if width > 1
        else None
    )
    logits = first.logits[batch.prompt_of]  # (B, 1, V): predicts the first completion token
    if rest is not None:
        logits = torch.cat([logits, rest.logits], dim=1)
    return token_stats(logits, batch.completion_ids, temperature, with_entropy)
