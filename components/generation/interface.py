"""What a generation engine is: its samples, its interface, its failures and its registry.

An engine (`vllm`, `transformers`; `components.generation.engines` picks and starts one) takes a
whole evaluation set in one call and returns, per prompt, n `Sample`s. The engine modules import
this one and register their factory with `@register_engine("name")`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from components.config import EvalConfig
from components.contracts.errors import UserError
from components.contracts.naming import NameRegistry
from components.generation.sampling import Sample, SamplingConfig


@dataclass(frozen=True)
class ChoicePrompt:
    """A user message and the start of the assistant's answer, scored on its next token."""

    user: str
    assistant_prefix: str = ""


class GenerationEngine(Protocol):
    """What evaluation needs from an engine."""

    name: str
    tokenizer: object  # the model's tokenizer (the one the prompts are encoded with)

    def generate(self, prompts: Sequence[str], cfg: SamplingConfig, adapter: Path | None = None) -> list[list[Sample]]:
        """cfg.n samples for every prompt (user messages, chat template applied by the engine)."""
        ...

    def choice_logprobs(self, prompts: Sequence[ChoicePrompt], choice_ids: Sequence[int], adapter: Path | None = None) -> list[list[float]]:
        """Per prompt, log p(c | prompt) of each token id c of `choice_ids` at the position after the
        assistant prefix: one prefill, no sampling, deterministic (decision benchmarks)."""
        ...

    def close(self) -> None:
        """Release the engine (processes, memory)."""
        ...


class EngineUnavailableError(UserError, RuntimeError):
    """The engine's package is not installed (the message says which and how to install it)."""


class EngineStartError(UserError, RuntimeError):
    """The engine is installed but could not start (the message names the cause)."""


EngineFactory = Callable[[Path, EvalConfig, str, int], GenerationEngine]
ENGINES = NameRegistry[EngineFactory]("engine")


def register_engine(name: str) -> Callable[[EngineFactory], EngineFactory]:
    """Register `factory(model_dir, eval_cfg, dtype, seed) -> GenerationEngine` under `name`."""
    return ENGINES.register(name)


def validate_samples(outputs: list[list[Sample]], n_prompts: int, n: int, engine: str) -> None:
    """Every prompt got exactly n samples (an engine that drops requests must not go unnoticed)."""
    if len(outputs) != n_prompts or any(len(samples) != n for samples in outputs):
        counts = sorted({len(samples) for samples in outputs})
        raise RuntimeError(
            f"{engine} engine returned {len(outputs)} prompt outputs with {counts} samples each for {n_prompts} prompts x n={n}"
        )
