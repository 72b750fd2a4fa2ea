"""The transformers engine: `sampling.TransformersEngine` (HF generate) behind the engine interface.

Sampling is the one training rollouts use (same chat template, same seeding, same decode loop).
Per-token log-probabilities are the sampler's own, taken while decoding (no second forward pass),

    log p_t = z_t[o_t] / τ − logsumexp(z_t / τ)      (z_t: logits at completion position t, τ: temperature)

i.e. the log-probability under the temperature-scaled distribution the tokens were drawn from (the
same quantity vLLM returns with `logprobs_mode="processed_logprobs"` when top_p = 1).
`score_completions` recomputes them teacher-forced; the tests use it to check the sampler's.
A LoRA adapter is put on the loaded base model with peft; the base model is evaluated with the
adapter disabled, so one engine serves base and tuned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from components.config import EvalConfig
from components.generation.interface import ChoicePrompt, EngineStartError, register_engine, validate_samples
from components.generation.sampling import Sample, SamplingConfig, TransformersEngine, answer_prompt
from components.machine import warn_if_emulated_bf16
from components.models.logprobs import completion_logprobs, pack


@torch.no_grad()
def score_completions(model, completions: Sequence[Sample], pad_id: int, temperature: float) -> list[tuple[float, ...]]:
    """log p of every completion token under `model` at `temperature`, teacher-forced in the training
    update's layout (`models.logprobs.pack`: prompts left-, completions right-padded)."""
    if not any(c.completion_ids for c in completions):
        return [() for _ in completions]
    batch = pack(completions, pad_id).to(model.device)
    logp = completion_logprobs(model, batch, temperature).logp
    return [tuple(float(x) for x in logp[i, : len(c.completion_ids)].tolist()) for i, c in enumerate(completions)]


class TransformersGenerationEngine:
    """HF generate on the base model, optionally with a peft LoRA adapter."""

    name = "transformers"

    def __init__(self, model_dir: Path, batch_size: int, dtype: str = "float32", show_progress: bool = False):
        from components.models.device import resolve_device
        from components.models.provision import ModelProvisionError, load_base_model

        try:
            self._model, self._tokenizer = load_base_model(Path(model_dir), dtype)
            self._model.to(resolve_device("auto"))  # the trainer's device policy: this process's GPU, else the CPU
        except (ModelProvisionError, OSError, ValueError) as exc:
            raise EngineStartError(f"transformers engine could not load {model_dir}: {exc}") from exc
        warn_if_emulated_bf16(dtype)
        self._batch_size = batch_size
        self._show_progress = show_progress
        self._adapter: Path | None = None
        self._peft = None

    def _model_for(self, adapter: Path | None):
        from components.models.lora import load_adapter

        if adapter is None:
            return self._model if self._peft is None else None
        adapter = Path(adapter).resolve()
        if self._peft is not None and adapter != self._adapter:  # another adapter: back to the bare base first
            self._model, self._peft, self._adapter = self._peft.unload(), None, None
        if self._peft is None:
            self._peft = load_adapter(self._model, adapter)
            self._adapter = adapter
        return self._peft

    @property
    def tokenizer(self):
        return self._tokenizer

    def choice_logprobs(self, prompts: Sequence[ChoicePrompt], choice_ids: Sequence[int], adapter: Path | None = None) -> list[list[float]]:
        """log_softmax of the last position's logits (fp32) at `choice_ids`, prompts left-padded,
        `batch_size` prompts per forward pass."""
        model = self._model_for(adapter)
        if model is None:
            with self._peft.disable_adapter():
                return self._choice_logprobs(self._peft, prompts, choice_ids)
        return self._choice_logprobs(model, prompts, choice_ids)

    @torch.no_grad()
    def _choice_logprobs(self, model, prompts: Sequence[ChoicePrompt], choice_ids: Sequence[int]) -> list[list[float]]:
        tok, rows = self._tokenizer, []
        tok.padding_side = "left"
        was_training = model.training
        model.eval()
        choices = torch.tensor(list(choice_ids), dtype=torch.long)
        for start in range(0, len(prompts), self._batch_size):
            texts = [answer_prompt(tok, p.user, p.assistant_prefix) for p in prompts[start : start + self._batch_size]]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            positions = (enc["attention_mask"].cumsum(dim=1) - 1).clamp(min=0)
            logits = model(**enc, position_ids=positions, logits_to_keep=1).logits[:, -1].float()
            rows += torch.log_softmax(logits, dim=-1)[:, choices.to(logits.device)].tolist()
        if was_training:
            model.train()
        return rows

    def generate(self, prompts: Sequence[str], cfg: SamplingConfig, adapter: Path | None = None) -> list[list[Sample]]:
        from components.generation.context import check_fits, context_length, longest_prompt_tokens

        longest = longest_prompt_tokens(self._tokenizer, prompts)
        check_fits(longest, cfg.max_new_tokens, "eval.max_new_tokens", context_length(self._model.config), "the model's context")
        model = self._model_for(adapter)
        if model is None:  # base model requested after an adapter was attached: disable it
            with self._peft.disable_adapter():
                return self._generate(self._peft, prompts, cfg)
        return self._generate(model, prompts, cfg)

    def _generate(self, model, prompts: Sequence[str], cfg: SamplingConfig) -> list[list[Sample]]:
        engine = TransformersEngine(model, self._tokenizer, self._batch_size, self._show_progress)
        outputs = engine.generate(list(prompts), cfg, "generate")
        eos = self._tokenizer.eos_token_id
        samples = []
        for per_prompt in outputs:
            row = []
            for c in per_prompt:
                ids, lps = c.completion_ids, c.logprobs
                if ids and ids[-1] == eos:  # vLLM reports the stop token neither: same convention
                    ids, lps = ids[:-1], lps[:-1]
                row.append(replace(c, completion_ids=tuple(ids), logprobs=tuple(lps)))
            samples.append(row)
        validate_samples(samples, len(prompts), cfg.n, self.name)
        return samples

    def close(self) -> None:
        self._model = self._peft = None


@register_engine("transformers")
def _transformers(model_dir: Path, cfg: EvalConfig, dtype: str, seed: int) -> TransformersGenerationEngine:
    """The evaluation's engine: a progress bar over its batches."""
    return TransformersGenerationEngine(model_dir, cfg.batch_size, dtype, show_progress=True)
