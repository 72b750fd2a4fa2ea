"""Batched sampling with transformers `generate`: chat template, n samples per prompt, seeded.

One interface for the rest of the pipeline: `TransformersEngine.generate(prompts, n, ...)` returns,
per prompt, n `Completion`s with their token ids. The same chat template (the tokenizer's own) is
applied everywhere, so training rollouts and evaluation see identical prompt encodings.
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
class Completion:
    prompt_index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    text: str
    truncated: bool


def chat_prompt(tokenizer, user_text: str) -> str:
    """The user message wrapped in the tokenizer's chat template, ready for the assistant turn."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], add_generation_prompt=True, tokenize=False
    )


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
    def generate(self, prompts: Sequence[str], cfg: SamplingConfig, desc: str = "generate") -> list[list[Completion]]:
        """n completions per prompt; deterministic for a given seed, prompts and batch size.

        Prompts are packed `batch_size // n` per call (at least one), each expanded n times.
        """
        tok = self.tokenizer
        eos = tok.eos_token_id
        texts = [chat_prompt(tok, p) for p in prompts]
        per_call = max(1, self.batch_size // cfg.n)
        results: list[list[Completion]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        starts = range(0, len(texts), per_call)
        for call_index, start in enumerate(
            tqdm(starts, desc=desc, disable=not self.show_progress, leave=False)
        ):
            chunk = texts[start : start + per_call]
            enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(self.model.device) for k, v in enc.items()}
            torch.manual_seed(cfg.seed + call_index)
            out = self.model.generate(
                **enc,
                do_sample=True,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                top_k=0,
                max_new_tokens=cfg.max_new_tokens,
                num_return_sequences=cfg.n,
                pad_token_id=tok.pad_token_id,
                eos_token_id=eos,
            )
            width = enc["input_ids"].shape[1]
            for row, seq in enumerate(out.tolist()):
                local = row // cfg.n
                prompt_row = enc["input_ids"][local]
                mask = enc["attention_mask"][local]
                prompt_ids = tuple(int(t) for t, m in zip(prompt_row.tolist(), mask.tolist()) if m)
                generated = seq[width:]
                if eos in generated:
                    completion_ids = generated[: generated.index(eos) + 1]
                    truncated = False
                else:
                    completion_ids = generated
                    truncated = True
                text = tok.decode(completion_ids, skip_special_tokens=True).strip()
                results[start + local].append(
                    Completion(start + local, prompt_ids, tuple(completion_ids), text, truncated)
                )
        if was_training:
            self.model.train()
        return results
