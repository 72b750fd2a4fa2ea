"""Batched sampling with a transformers causal LM: chat template, n samples per prompt, seeded.

One interface for the rest of the pipeline: `TransformersEngine.generate(prompts, n, ...)` returns,
per prompt, n `Sample`s with their token ids. The same chat template (the tokenizer's own) is
applied everywhere, so training rollouts and evaluation see identical prompt encodings.

The decode loop is the model's own forward with a transformers `DynamicCache`, written out rather
than `model.generate` for two savings `generate` cannot make: each prompt is prefilled once and its
KV cache gathered to its n samples (generate prefills every copy), and rows that reached EOS are
dropped from the batch (generate keeps computing them until the longest is done). Sampling is
temperature, then nucleus (top-p), from a seeded `torch.Generator`: the same distribution as
`generate(do_sample=True, top_k=0)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from tqdm.auto import tqdm


@dataclass(frozen=True)
class SamplingConfig:
    n: int
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int


@dataclass(frozen=True)
class Sample:
    """One sampled completion of one prompt: the one completion type of every engine (transformers,
    vLLM in its child process) and of the rollouts built from them."""

    prompt_index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # log p(token_t | prompt, tokens_<t) under softmax(logits / T), before the top-p cut
    text: str
    truncated: bool  # stopped by max_new_tokens, not by end of sequence

    @property
    def mean_logprob(self) -> float | None:
        """(1/T) Σ_t log p_t over the completion tokens; None for an empty completion."""
        return sum(self.logprobs) / len(self.logprobs) if self.logprobs else None


def chat_prompt(tokenizer, user_text: str) -> str:
    """The user message wrapped in the tokenizer's chat template, ready for the assistant turn."""
    return tokenizer.apply_chat_template([{"role": "user", "content": user_text}], add_generation_prompt=True, tokenize=False)


def answer_prompt(tokenizer, user_text: str, assistant_prefix: str) -> str:
    """The chat-templated user turn followed by the first words of the assistant's answer: the
    context in which a decision benchmark reads the next token ("... my answer would be \"")."""
    return chat_prompt(tokenizer, user_text) + assistant_prefix


def single_token_ids(tokenizer, words: tuple[str, ...], where: str, error: type[Exception] = ValueError) -> list[int]:
    """Token ids of the words the tokenizer writes as one token (a decision's answer words); `error`
    when none is."""
    ids = []
    for word in words:
        encoded = tokenizer(word, add_special_tokens=False).input_ids
        if len(encoded) == 1 and encoded[0] not in ids:
            ids.append(encoded[0])
    if not ids:
        raise error(f"{where}: none of {list(words)} is a single token of this model's tokenizer")
    return ids


class TransformersEngine:
    """Generation with a (possibly peft-wrapped) causal LM on the current device."""

    def __init__(self, model, tokenizer, batch_size: int, show_progress: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.tokenizer.padding_side = "left"

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], cfg: SamplingConfig, desc: str = "generate") -> list[list[Sample]]:
        """n completions per prompt; deterministic for a given seed, prompts and batch size.

        Prompts are packed `batch_size // n` per call (at least one), each sampled n times.
        """
        tok = self.tokenizer
        texts = [chat_prompt(tok, p) for p in prompts]
        per_call = max(1, self.batch_size // cfg.n)
        results: list[list[Sample]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        starts = range(0, len(texts), per_call)
        for call_index, start in enumerate(tqdm(starts, desc=desc, disable=not self.show_progress, leave=False)):
            chunk = texts[start : start + per_call]
            enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            generator = torch.Generator(device=self.model.device).manual_seed(cfg.seed + call_index)
            tokens = self._sample(enc["input_ids"], enc["attention_mask"], cfg, generator)
            for local, (ids, mask) in enumerate(zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist())):
                prompt_ids = tuple(t for t, m in zip(ids, mask) if m)
                for j in range(cfg.n):
                    completion_ids, logprobs, truncated = tokens[local * cfg.n + j]
                    text = tok.decode(completion_ids, skip_special_tokens=True).strip()
                    results[start + local].append(
                        Sample(start + local, prompt_ids, tuple(completion_ids), tuple(logprobs), text, truncated)
                    )
        if was_training:
            self.model.train()
        return results

    def _sample(self, input_ids, attention_mask, cfg: SamplingConfig, generator) -> list[tuple[list[int], list[float], bool]]:
        """(completion ids ending with EOS, their log-probs, truncated) for every prompt row x n samples."""
        from transformers import DynamicCache

        device = self.model.device
        eos = self.tokenizer.eos_token_id
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            past_key_values=DynamicCache(),
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.past_key_values
        cache.batch_repeat_interleave(cfg.n)
        logits = out.logits[:, -1].repeat_interleave(cfg.n, dim=0)
        mask = attention_mask.repeat_interleave(cfg.n, dim=0)
        next_pos = positions[:, -1].repeat_interleave(cfg.n, dim=0) + 1
        rows = torch.arange(logits.shape[0], device=device)  # original row of each live row
        tokens: list[list[int]] = [[] for _ in range(logits.shape[0])]
        logprobs: list[list[float]] = [[] for _ in range(logits.shape[0])]
        done = [False] * logits.shape[0]
        for step in range(cfg.max_new_tokens):
            chosen, chosen_logp = sample_next(logits, cfg.temperature, cfg.top_p, generator)
            finished = chosen == eos
            for row, token, lp in zip(rows.tolist(), chosen.tolist(), chosen_logp.tolist()):
                tokens[row].append(token)
                logprobs[row].append(lp)
            for row in rows[finished].tolist():
                done[row] = True
            if step == cfg.max_new_tokens - 1 or bool(finished.all()):
                break
            keep = ~finished
            if not bool(keep.all()):  # drop finished rows from the batch and the cache
                index = keep.nonzero().squeeze(1)
                cache.batch_select_indices(index)
                rows, chosen, mask, next_pos = rows[index], chosen[index], mask[index], next_pos[index]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(
                input_ids=chosen.unsqueeze(1),
                attention_mask=mask,
                position_ids=next_pos.unsqueeze(1),
                past_key_values=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1]
            next_pos = next_pos + 1
        return [(ids, lps, not finished_row) for ids, lps, finished_row in zip(tokens, logprobs, done)]


def sample_next(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from softmax(logits / T), restricted to the top-p nucleus (Holtzman et al. 2020),
    and its log-prob under softmax(logits / T). T = 0 is greedy: the argmax, with its log-prob under
    softmax(logits)."""
    if temperature == 0:
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        chosen = log_probs.argmax(dim=-1)
        return chosen, log_probs.gather(-1, chosen.unsqueeze(1)).squeeze(1)
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    probs = log_probs.exp()
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the top token always stays)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs > top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return chosen, log_probs.gather(-1, chosen.unsqueeze(1)).squeeze(1)
