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
returned `EngineChoice` (evaluation writes it into metrics.json and the summary). `open_engines`
starts several at once (the evaluation's sampling engine and its decision benchmarks' in fp32). `Sample`, the
engine interface, its errors and the registry live in `components.generation.interface` (the engine
modules import that, not this module, which imports them) and are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from components.config import EvalConfig
from components.generation.interface import (
    ENGINES,
    ChoicePrompt,
    EngineFactory,
    EngineStartError,
    EngineUnavailableError,
    GenerationEngine,
    Sample,
    register_engine,
    validate_samples,
)

__all__ = [
    "ENGINES",
    "ChoicePrompt",
    "EngineChoice",
    "EngineFactory",
    "EngineStartError",
    "EngineUnavailableError",
    "GenerationEngine",
    "Sample",
    "open_engine",
    "open_engines",
    "register_engine",
    "validate_samples",
]

log = logging.getLogger(__name__)


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


def open_engine(name: str, model_dir: Path, cfg: EvalConfig, dtype: str, seed: int) -> tuple[GenerationEngine, EngineChoice]:
    """Start engine `name` on the base model in `model_dir`, falling back only if `cfg` allows it."""
    # the engines register themselves on import
    from components.generation import transformers_engine, vllm_engine  # noqa: F401

    factory = ENGINES.get(name, where="eval.engine")
    try:
        return factory(Path(model_dir), cfg, dtype, seed), EngineChoice(name, name)
    except (EngineUnavailableError, EngineStartError) as exc:
        fallback = "transformers"
        if not cfg.allow_fallback or name == fallback:
            hint = "" if name == fallback else f" (set eval.allow_fallback: true in params.yaml to use {fallback} instead)"
            raise type(exc)(f"{exc}{hint}") from exc
        reason = f"{name} engine could not start: {exc}"
        log.warning("FALLBACK to the %s engine (eval.allow_fallback is true): %s", fallback, reason)
        return ENGINES[fallback](Path(model_dir), cfg, dtype, seed), EngineChoice(name, fallback, reason)


def open_engines(
    name: str, model_dir: Path, cfg: EvalConfig, dtypes: Sequence[str], seed: int
) -> list[tuple[GenerationEngine, EngineChoice]]:
    """`open_engine` for each of `dtypes`, all started at once, in that order.

    Why at once: a vLLM engine's start is mostly its child process importing torch and vLLM, on
    one core, so on a 2-core CPU two engines start in about the time of one (the quick start's
    evaluation: 17 s to start its bf16 engine alone, 16 s to start it and the decision benchmarks'
    fp32 engine together); an engine waits idle until it is called. Where torch sees a CUDA GPU they start one after the other (vLLM's start measures the
    GPU's free memory, which another engine's start would move). If one cannot start, the others
    are closed and its error is raised.
    """
    import torch

    if len(dtypes) == 1:
        return [open_engine(name, model_dir, cfg, dtypes[0], seed)]
    workers = 1 if torch.cuda.is_available() else len(dtypes)
    with ThreadPoolExecutor(workers, thread_name_prefix="engine-start") as pool:
        futures = [pool.submit(open_engine, name, model_dir, cfg, dtype, seed) for dtype in dtypes]
        wait(futures)
    opened = [f.result() for f in futures if f.exception() is None]
    failed = next((f.exception() for f in futures if f.exception() is not None), None)
    if failed is not None:
        for engine, _ in opened:
            engine.close()
        raise failed
    return opened
