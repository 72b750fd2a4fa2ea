"""One generation interface, several engines: `vllm` (batched, fast) and `transformers` (HF generate).

An engine takes a whole evaluation set in one call and returns, per prompt, n `Sample`s with the
token ids and the per-token log-probabilities of the sampled tokens. Both engines apply the chat
template the same way (`sampling.chat_prompt`, then the tokenizer without special tokens), so they
see identical prompt token ids; both are seeded by `SamplingConfig.seed` and reproducible for the
same prompts (each engine with its own random stream: vLLM and HF do not draw the same samples).

A LoRA adapter folder (peft: `adapter_config.json` + `adapter_model.safetensors`) is evaluated
through vLLM's LoRA support (`LoRARequest`) or, in the transformers engine, with peft on the
loaded base model; `adapter=None` means the base model.

`open_engine` starts the engine named in params (`eval.engine`); if it cannot start, it falls back
to transformers only when `eval.allow_fallback` is true, logs a warning and records why in the
returned `EngineChoice` (evaluation writes it into metrics.json and the summary).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from components.config import EvalConfig
from components.generation.sampling import SamplingConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One sampled completion of one prompt."""

    prompt_index: int
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # log p(token_t | prompt, tokens_<t) of each completion token
    text: str
    truncated: bool  # stopped by max_new_tokens, not by end of sequence

    @property
    def mean_logprob(self) -> float | None:
        """(1/T) Σ_t log p_t over the completion tokens; None for an empty completion."""
        return sum(self.logprobs) / len(self.logprobs) if self.logprobs else None


class GenerationEngine(Protocol):
    """What evaluation needs from an engine."""

    name: str

    def generate(
        self, prompts: Sequence[str], cfg: SamplingConfig, adapter: Path | None = None
    ) -> list[list[Sample]]:
        """cfg.n samples for every prompt (user messages, chat template applied by the engine)."""
        ...

    def close(self) -> None:
        """Release the engine (processes, memory)."""
        ...


class EngineUnavailableError(RuntimeError):
    """The engine's package is not installed (the message says which and how to install it)."""


class EngineStartError(RuntimeError):
    """The engine is installed but could not start (the message names the cause)."""


@dataclass(frozen=True)
class EngineChoice:
    """Which engine ran, and why it is not the requested one when it fell back."""

    requested: str
    used: str
    fallback_reason: str = ""  # empty: no fallback

    @property
    def fell_back(self) -> bool:
        return self.requested != self.used

    def to_dict(self) -> dict:
        return {
            "requested": self.requested,
            "used": self.used,
            "fallback": self.fell_back,
            "fallback_reason": self.fallback_reason,
        }


EngineFactory = Callable[[Path, EvalConfig, str, int], GenerationEngine]
ENGINES: dict[str, EngineFactory] = {}


def register_engine(name: str) -> Callable[[EngineFactory], EngineFactory]:
    """Register `factory(model_dir, eval_cfg, dtype, seed) -> GenerationEngine` under `name`."""

    def decorator(factory: EngineFactory) -> EngineFactory:
        if name in ENGINES:
            raise ValueError(f"generation engine {name!r} is already registered")
        ENGINES[name] = factory
        return factory

    return decorator


def validate_samples(outputs: list[list[Sample]], n_prompts: int, n: int, engine: str) -> None:
    """Every prompt got exactly n samples (an engine that drops requests must not go unnoticed)."""
    if len(outputs) != n_prompts or any(len(samples) != n for samples in outputs):
        counts = sorted({len(samples) for samples in outputs})
        raise RuntimeError(
            f"{engine} engine returned {len(outputs)} prompt outputs with {counts} samples each "
            f"for {n_prompts} prompts x n={n}"
        )


def open_engine(name: str, model_dir: Path, cfg: EvalConfig, dtype: str, seed: int) -> tuple[GenerationEngine, EngineChoice]:
    """Start engine `name` on the base model in `model_dir`, falling back only if `cfg` allows it."""
    # the engines register themselves on import
    from components.generation import transformers_engine, vllm_engine  # noqa: F401

    if name not in ENGINES:
        raise ValueError(f"eval.engine: unknown engine {name!r}; known: {sorted(ENGINES)}")
    try:
        return ENGINES[name](Path(model_dir), cfg, dtype, seed), EngineChoice(name, name)
    except (EngineUnavailableError, EngineStartError) as exc:
        fallback = "transformers"
        if not cfg.allow_fallback or name == fallback:
            hint = "" if name == fallback else f" (set eval.allow_fallback: true in params.yaml to use {fallback} instead)"
            raise type(exc)(f"{exc}{hint}") from exc
        reason = f"{name} engine could not start: {exc}"
        log.warning("FALLBACK to the %s engine (eval.allow_fallback is true): %s", fallback, reason)
        return ENGINES[fallback](Path(model_dir), cfg, dtype, seed), EngineChoice(name, fallback, reason)
