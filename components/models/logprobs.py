"""Per-token log-probabilities of completions under a causal LM.

Layout (as TRL's GRPOTrainer): prompts left-padded to P, completions right-padded to C, joined, so
every completion starts at column P. Only the last C + 1 positions get logits (`logits_to_keep`),
which skips the vocabulary projection of every prompt token. Position ids follow the attention
mask, matching what `generate` used when the completion was sampled.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Protocol, Sequence

import torch

from components.contracts.rollouts import Rollout


class TokenizedCompletion(Protocol):
    """What the packed layout reads of a sample: a training `Rollout` or an engine's `Sample`."""

    @property
    def prompt_ids(self) -> tuple[int, ...]: ...

    @property
    def completion_ids(self) -> tuple[int, ...]: ...


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


def _left_padded(sequences: Sequence[tuple[int, ...]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences left-padded to the longest: ids (N, P) and mask (N, P) long."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        if seq:
            ids[i, width - len(seq) :] = torch.tensor(seq)
            mask[i, width - len(seq) :] = 1
    return ids, mask


def _pad_completions(rollouts: Sequence[TokenizedCompletion], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Completions right-padded to the longest: ids (B, C) and mask (B, C) bool."""
    width = max(len(r.completion_ids) for r in rollouts)
    completion = torch.full((len(rollouts), width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(rollouts), width), dtype=torch.bool)
    for i, r in enumerate(rollouts):
        completion[i, : len(r.completion_ids)] = torch.tensor(r.completion_ids)
        completion_mask[i, : len(r.completion_ids)] = True
    return completion, completion_mask


def pack(rollouts: Sequence[TokenizedCompletion], pad_id: int) -> PackedBatch:
    prompt, prompt_mask = _left_padded([r.prompt_ids for r in rollouts], pad_id)
    completion, completion_mask = _pad_completions(rollouts, pad_id)
    attention = torch.cat([prompt_mask, completion_mask.long()], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    return PackedBatch(torch.cat([prompt, completion], dim=1), attention, positions, completion, completion_mask)


@dataclass
class TokenStats:
    logp: torch.Tensor  # (B, C) log pi(o_t | q, o_<t), differentiable
    entropy: torch.Tensor | None  # (B, C) entropy of the sampling distribution at t (no grad)


# Bytes of fp32 logits handled at a time: on a CPU a block that stays in cache through the cast,
# the logsumexp, the gather and the entropy (2 MB: ten positions of a 49,152-token vocabulary; a
# block of 1,200 positions took 4x as long on the 2-core benchmark CPU); on a GPU fewer, larger kernels.
_BLOCK_BYTES = {"cpu": 2 << 20}
_BLOCK_BYTES_ACCELERATOR = 512 << 20


class _SampledTokenLogProb(torch.autograd.Function):
    """log softmax(z / T)[target] and, without gradient, the entropy of softmax(z / T), computed a
    block of positions at a time; backward: d logp / d z = (onehot(target) - softmax(z / T)) * g / T.

    The same operations, in the same order, as autograd on `z.float() / T` then gather - logsumexp
    (tested equal to the bit), without its fp32 copies of the whole (B, C, V) logits: the cast, the
    division and the softmax of logsumexp's backward each wrote and read one (about a quarter of a CPU
    step's forward and backward went to them), and the first two were kept for the backward. Written
    by hand because no library fuses it off the GPU (TRL's `selective_log_softmax` loops the
    logsumexp for memory but leaves the backward to autograd; Liger's fused kernels are Triton).
    """

    @staticmethod
    def forward(ctx, logits, targets, temperature: float, with_entropy: bool):
        shape = targets.shape
        logp = torch.empty(shape, dtype=torch.float32, device=logits.device)
        log_z = torch.empty(shape, dtype=torch.float32, device=logits.device)
        entropy = torch.empty(shape, dtype=torch.float32, device=logits.device) if with_entropy else None
        for block in _blocks(logits):
            z = logits[block].float() / temperature
            lz = torch.logsumexp(z, dim=-1)
            log_z[block] = lz
            logp[block] = z.gather(-1, targets[block].unsqueeze(-1)).squeeze(-1) - lz
            if with_entropy:
                probs = torch.exp(z - lz.unsqueeze(-1))
                entropy[block] = lz - (probs * z).sum(-1)
        ctx.save_for_backward(logits, targets, log_z)
        ctx.temperature = temperature
        if entropy is None:
            return logp
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy=None):
        logits, targets, log_z = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for block in _blocks(logits):
            z = logits[block].float() / ctx.temperature
            g = grad_logp[block].unsqueeze(-1)
            grad_z = -g * torch.exp(z - log_z[block].unsqueeze(-1))
            grad_z.scatter_add_(-1, targets[block].unsqueeze(-1), g)
            grad[block] = (grad_z / ctx.temperature).to(logits.dtype)
        return grad, None, None, None


def _blocks(logits: torch.Tensor):
    """Indices (row, slice of positions) covering logits (B, C, V), each block within the device's byte budget."""
    batch, width, vocab = logits.shape
    per_block = max(1, _BLOCK_BYTES.get(logits.device.type, _BLOCK_BYTES_ACCELERATOR) // (4 * vocab))
    for b in range(batch):
        for start in range(0, width, per_block):
            yield (b, slice(start, start + per_block))


def token_stats(logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool) -> TokenStats:
    """From logits (B, C, V) predicting targets (B, C): log-probs under softmax(z / T) and, if asked,
    the entropy H_t = logZ_t - sum_v p_v z_v of that distribution (`_SampledTokenLogProb`)."""
    if with_entropy:
        logp, entropy = _SampledTokenLogProb.apply(logits, targets, temperature, True)
        return TokenStats(logp, entropy)
    return TokenStats(_SampledTokenLogProb.apply(logits, targets, temperature, False), None)


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
    prompt_ids, prompt_mask = _left_padded(prompts, pad_id)
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
    # the first completion token is predicted by the prompt's last position, the rest by the
    # completion's own; each part is read where it lies (no (B, C, V) copy to join them)
    head = token_stats(first.logits[batch.prompt_of], batch.completion_ids[:, :1], temperature, with_entropy)
    if rest is None:
        return head
    tail = token_stats(rest.logits, batch.completion_ids[:, 1:], temperature, with_entropy)
    entropy = torch.cat([head.entropy, tail.entropy], dim=1) if with_entropy else None
    return TokenStats(torch.cat([head.logp, tail.logp], dim=1), entropy)
