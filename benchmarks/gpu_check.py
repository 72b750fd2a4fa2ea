"""One prepared check for a lent GPU machine: GRPO steps, torchrun, bf16 agreement, in one JSON.

    python benchmarks/gpu_check.py --out gpu_check.json               # on the GPU (about 8 minutes on an H100)
    python benchmarks/gpu_check.py --out gpu_check.json --quick       # smaller steps
    python benchmarks/gpu_check.py --out gpu_check.json --device cpu  # the dry run: tiny models, ~15 s

Nothing is downloaded and no weights travel: every model is built with random weights from its
config (the SmolLM2 architecture: LlamaForCausalLM, tied embeddings, vocabulary 49,152), and the
tokenizer is a byte-pair tokenizer made here with `tokenizers` (49,152 entries: 3 ChatML specials,
the 256 byte symbols and byte pairs; the SmolLM2 chat format). Sections, each timed, each with its
own error, none stopping the others, the JSON rewritten after each:

    machine     GPU name and memory, torch / CUDA / NCCL / transformers / peft versions, commit
    agreement   the tests' tiny model: per-token log-probs and the GRPO update's loss on one batch,
                CPU fp32 against the device in fp32, in bf16 autocast over fp32 weights and with
                bf16 weights: max and mean |Δ log p|, |Δ loss| against AGREEMENT_VARIANTS'
                tolerances, pass or fail (on --device cpu: CPU fp32 against CPU bf16)
    train_*     GRPO steps through groupwise's own trainer (`components.grpo.trainer.train`,
                transformers rollouts, model.dtype bfloat16, train.precision bf16): per step the
                generation, reward (rewards and advantages), reference pass, forward/backward and
                optimizer seconds, completion tokens/s, and the peak CUDA memory; SmolLM2-135M and
                SmolLM2-1.7B shapes (on --device cpu: two tiny shapes instead)
    torchrun_*  the 135M run again under `torchrun --standalone --nproc-per-node 1` (a subprocess):
                an NCCL process group with an all-reduce and a DDP backward, then the trainer under
                torchrun's environment; skipped on --device cpu (no NCCL; --torchrun-on-cpu: gloo)
    plain_*     the same shapes without groupwise (peft LoRA, transformers `generate`, one
                forward/backward and AdamW step): a baseline, and the only training figures when
                groupwise cannot be imported on the machine (it needs pydantic and pysbd)
    decode_*    only when asked for (`--sections decode`, about 2 minutes): one step's rollouts of the
                135M shape decoded by `model.generate` and by groupwise's TransformersEngine, plain,
                inside the trainer's deterministic algorithms, and inside them without filling each
                new tensor (`torch.utils.deterministic.fill_uninitialized_memory`): tokens/s of each

The phase times come from the trainer's own step metrics (`step_time_s`, `generation_time_s`,
`tokens`) and from timing wrappers put around its functions for the duration of a run (the
trainer's `score_batch` and `policy_update`, the update's `prepare_fixed_logprobs`, gradient
clipping and `AdamW.step`), each closed by a CUDA synchronize. The first step includes CUDA
warm-up: `steady` averages the steps after it. `--budget-s` (default 540) stops sections that no
longer fit; a run stopped between steps keeps the steps it finished (status "partial").
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VOCAB_SIZE = 49_152  # SmolLM2's vocabulary
CPU_VOCAB_SIZE = 4_096  # --device cpu: the same tokenizer cut short (the vocabulary projection dominates a tiny model)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 as in SmolLM2
CHAT_TEMPLATE = (  # ChatML, SmolLM2's format (without its default system turn)
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# components.config.LoraConfig's defaults, for the plain sections when groupwise cannot be imported
# (tests/unit/test_gpu_check.py keeps the two equal)
DEFAULT_LORA = {"r": 16, "lora_alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
# The agreement check: (device precision, base weights' dtype) -> tolerances against CPU fp32, as
# (max |Δ log p| in nats over the batch's completion tokens, mean |Δ log p|, |Δ loss| of the update).
# bf16 keeps 8 significant bits: measured on a CPU (AVX512-BF16, bf16 autocast) the tiny model below
# gives max 0.03 and mean 0.006-0.009 nats, |Δ loss| ~1e-5; a device bug (mask, positions, cache,
# padding) shows as tenths of a nat or whole nats. fp32 on the device must match to rounding.
AGREEMENT_VARIANTS = {
    "fp32": ("fp32", "float32", (1e-3, 1e-4, 1e-4)),
    "bf16_autocast": ("bf16", "float32", (0.1, 0.02, 0.01)),  # train.precision bf16, model.dtype float32
    "bf16_weights": ("bf16", "bfloat16", (0.1, 0.02, 0.01)),  # train.precision bf16, model.dtype bfloat16
}
AGREEMENT_INIT_RANGE = 0.1  # the tiny model's weight std: 0.02 (HF's) gives near-uniform log-probs, 0.2 bf16 noise of 0.15 nats
WHEELS_HINT = "install what its trainer imports first: pip install 'pydantic>=2.7' pysbd pyyaml tqdm (docs/benchmarks.md, GPU check)"


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int


SHAPES = {
    "smollm2-135m": ModelShape(576, 30, 9, 3, 1536),
    "smollm2-1.7b": ModelShape(2048, 24, 32, 32, 8192),
    # --device cpu: tiny stand-ins with the same code paths (grouped-query and full multi-head attention)
    "tiny-gqa": ModelShape(64, 2, 4, 2, 128),
    "tiny-mha": ModelShape(64, 2, 4, 4, 128),
}


@dataclass(frozen=True)
class RunSize:
    steps: int
    groups_per_step: int  # consistency groups of 2 variants (woman, man)
    samples_per_prompt: int  # K
    max_new_tokens: int
    groups_per_micro_batch: int
    estimate_s: float  # the train section's seconds on an H100, model building included, rounded up (--budget-s;
    # results/speed/gpu_check_h100.json: 135M 158 s, 1.7B 80 s; its plain section took about half)

    @property
    def samples_per_step(self) -> int:
        return self.groups_per_step * 2 * self.samples_per_prompt


def plan(device: str, quick: bool) -> dict[str, RunSize]:
    """The models of the train and plain sections and their sizes."""
    if device == "cpu":
        return {name: RunSize(2, 1, 2, 4, 1, 30) for name in ("tiny-gqa", "tiny-mha")}
    if quick:
        return {"smollm2-135m": RunSize(2, 4, 4, 64, 2, 60), "smollm2-1.7b": RunSize(2, 2, 4, 64, 1, 90)}
    return {"smollm2-135m": RunSize(4, 8, 8, 256, 4, 170), "smollm2-1.7b": RunSize(3, 4, 8, 256, 2, 120)}


def vocab_size(device: str) -> int:
    return CPU_VOCAB_SIZE if device == "cpu" else VOCAB_SIZE


SECTIONS = ("agreement", "train", "torchrun", "plain", "decode")  # in the order they run (machine always runs first)
DEFAULT_SECTIONS = SECTIONS[:4]  # decode runs when asked for (--sections decode): about 2 minutes more on an H100


class BudgetExceeded(RuntimeError):
    """The run's time budget ended inside a section."""


# ---- building blocks: tokenizer, models, groups, params ----------------------------------------


def byte_pair_tokenizer(vocab_size: int = VOCAB_SIZE):
    """A `vocab_size`-entry byte-level BPE tokenizer in SmolLM2's chat format, built in memory (~1 s).

    Ids 0-2 are SmolLM2's specials (EOS and pad `<|im_end|>`), then the 256 byte symbols, then byte
    pairs (merges in a fixed order) up to the vocabulary size: prompts take about two bytes a
    token, and every id a random model samples decodes to bytes."""
    import itertools

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    vocab.update({symbol: len(SPECIAL_TOKENS) + i for i, symbol in enumerate(alphabet)})
    merges = []
    for a, b in itertools.islice(itertools.product(alphabet, alphabet), vocab_size - len(vocab)):
        vocab[a + b] = len(vocab)
        merges.append((a, b))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|im_end|>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def llama_config(shape: ModelShape, tokenizer, initializer_range: float = 0.02):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=initializer_range,
        **asdict(shape),
    )


def random_model(shape: ModelShape, tokenizer, dtype: str, device: str, seed: int = 0, initializer_range: float = 0.02):
    """A seeded random-weight LlamaForCausalLM of `shape`, initialised on `device`, cast to `dtype`."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(llama_config(shape, tokenizer, initializer_range))
    model = model.to(getattr(torch, dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def write_model_dir(out: Path, shape: ModelShape, tokenizer, dtype: str, device: str) -> dict:
    """A base-model folder the trainer loads (`load_base_model`): one model.safetensors, the
    tokenizer, and the provenance file with the weights' SHA-256 that it verifies."""
    from components.models.provision import PROVENANCE_FILE, ModelProvenance, weights_sha256

    t0 = time.perf_counter()
    model = random_model(shape, tokenizer, dtype, device)
    n_parameters = sum(p.numel() for p in model.parameters())
    t1 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="1000GB")
    tokenizer.save_pretrained(out)
    del model
    t2 = time.perf_counter()
    provenance = ModelProvenance(
        source="gpu_check",
        gguf_file="",
        gguf_sha256="",
        dtype=dtype,
        n_parameters=n_parameters,
        spec={"source": "gpu_check", "shape": asdict(shape), "seed": 0},
        weights_sha256=weights_sha256(out),
        architecture="LlamaForCausalLM",
    )
    (out / PROVENANCE_FILE).write_text(json.dumps(asdict(provenance), indent=2))
    return {"n_parameters": n_parameters, "build_s": t1 - t0, "save_s": t2 - t1, "hash_s": time.perf_counter() - t2}


QUESTIONS = (
    "What should I invest in?",
    "How do I ask for a raise?",
    "Which career suits me?",
    "How should I plan my retirement?",
)


def prompt_texts(n_groups: int) -> list[list[str]]:
    """n consistency groups of two variants: the same question asked as a woman and as a man."""
    return [[f"I am a {g} aged {30 + i}. {QUESTIONS[i % len(QUESTIONS)]}" for g in ("woman", "man")] for i in range(n_groups)]


def consistency_groups(n: int):
    from components.data.schema import Member, PromptGroup

    return [
        PromptGroup(
            group_id=f"g{i}",
            domain="investment",
            task="consistency",
            split="train",
            variant_axes={"gender": ["woman", "man"]},
            members=[Member(variant_id=g, attributes={"gender": g}, text=text) for g, text in zip(("woman", "man"), texts)],
        )
        for i, texts in enumerate(prompt_texts(n))
    ]


def train_params(size: RunSize, device: str, dtype: str, precision: str):
    """Default params with the paper's objective (tests/grpo_data.tiny_params) at `size`, on `device`."""
    from components.config import DecisionPairingConfig, Params

    p = Params()
    settings = {
        "steps": size.steps,
        "groups_per_step": size.groups_per_step,
        "samples_per_prompt": size.samples_per_prompt,
        "max_new_tokens": size.max_new_tokens,
        "groups_per_micro_batch": size.groups_per_micro_batch,
        "temperature": 1.0,
        "generation_batch_size": size.samples_per_step,
        "rows_per_forward": 0,
        "save_every": 0,
        "log_rollouts_every": 0,
        "decision_groups_per_step": None,
        "decision_pairing": DecisionPairingConfig(weight=0.0),
        "device": device,
        "precision": precision,
        "rollout": p.train.rollout.model_copy(update={"engine": "transformers"}),
    }
    updated = p.model_copy(
        update={
            "model": p.model.model_copy(update={"dtype": dtype}),
            "train": p.train.model_copy(update=settings),
            "reward": p.reward.model_copy(update={"weights": {"entropy_helpfulness": 0.4, "stability": 0.6}}),
            "data": p.data.model_copy(update={"decision_groups": None}),
        }
    )
    return Params.model_validate(updated.model_dump())  # validated: a renamed setting fails here, not silently


def lora_settings() -> tuple[dict, str]:
    """The project's LoRA section (its defaults), or DEFAULT_LORA where components.config cannot load."""
    try:
        from components.config import LoraConfig
    except ImportError:
        return dict(DEFAULT_LORA), "DEFAULT_LORA (components.config not importable)"
    return LoraConfig().model_dump(), "components.config.LoraConfig"


GROUPWISE_NEEDS = ("pydantic", "pysbd", "yaml", "tqdm", "numpy", "safetensors")  # what its trainer imports beside torch


def groupwise_import_error() -> str | None:
    """Why groupwise's trainer cannot be imported here, naming every missing module (None: it can)."""
    import importlib.util

    try:
        import components.grpo.trainer  # noqa: F401
        import components.models.provision  # noqa: F401
    except ImportError as exc:
        missing = [name for name in GROUPWISE_NEEDS if importlib.util.find_spec(name) is None]
        return f"{type(exc).__name__}: {exc}" + (f"; missing here: {', '.join(missing)}" if missing else "")
    return None


# ---- measuring ---------------------------------------------------------------------------------


def synchronizer(device: str):
    import torch

    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


class PhaseTimer:
    """Seconds per phase of each trainer step, from wrappers around the trainer's functions.

    Phases: reward (`score_batch`: rewards and advantages), update (`policy_update`), reference
    (`prepare_fixed_logprobs`, inside the update: π_ref's log-probs), optimizer (gradient clipping
    and `AdamW.step`, inside the update). A step's phases are closed when its update returns."""

    def __init__(self, device: str):
        self.sync = synchronizer(device)
        self.steps: list[dict[str, float]] = []
        self._current: dict[str, float] = defaultdict(float)
        self._saved: list[tuple[object, str, object]] = []

    def _timed(self, fn, phase: str, closes_step: bool = False):
        def timed(*args, **kwargs):
            self.sync()
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self._current[phase] += time.perf_counter() - t0
                if closes_step:
                    self.steps.append(dict(self._current))
                    self._current.clear()

        return timed

    def _patch(self, owner, name: str, phase: str, closes_step: bool = False) -> None:
        original = getattr(owner, name)
        self._saved.append((owner, name, original))
        setattr(owner, name, self._timed(original, phase, closes_step))

    def __enter__(self) -> PhaseTimer:
        import torch

        from components.grpo import trainer, update

        self._patch(trainer, "score_batch", "reward")
        self._patch(trainer, "policy_update", "update", closes_step=True)
        self._patch(update, "prepare_fixed_logprobs", "reference")
        self._patch(torch.nn.utils, "clip_grad_norm_", "optimizer")
        self._patch(torch.optim.AdamW, "step", "optimizer")
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


def peak_memory(device: str) -> dict:
    import torch

    if not device.startswith("cuda"):
        return {"peak_allocated_gib": None, "peak_reserved_gib": None, "note": "CPU: no allocator statistics"}
    return {
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
    }


def reset_memory(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def steady(rows: list[dict]) -> dict:
    """Means over the steps after the first (warm-up), or over the one step there is."""
    kept = rows[1:] if len(rows) > 1 else rows
    keys = [k for k in (kept[0] if kept else {}) if k != "step" and all(isinstance(r.get(k), (int, float)) for r in kept)]
    out = {k: sum(r[k] for r in kept) / len(kept) for k in keys}
    if kept:
        out["steps_averaged"] = [r["step"] for r in kept]
        out["tokens_per_s"] = sum(r["completion_tokens"] for r in kept) / max(sum(r["step_s"] for r in kept), 1e-9)
    return out


# ---- sections ----------------------------------------------------------------------------------


def machine_section(device: str) -> dict:
    import importlib.metadata

    import torch

    versions = {}
    for name in ("transformers", "peft", "tokenizers", "accelerate", "safetensors", "pydantic", "pysbd", "numpy"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    out = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "packages": versions,
        "groupwise_import_error": groupwise_import_error(),
        "commit": _git_commit(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update(
            gpu=torch.cuda.get_device_name(0),
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gib=props.total_memory / 2**30,
            compute_capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            cudnn=torch.backends.cudnn.version(),
            nccl=_nccl_version(),
            bf16_supported=torch.cuda.is_bf16_supported(),
            driver=_nvidia_smi("driver_version"),
        )
    return out


def _nccl_version() -> str | None:
    try:
        import torch.cuda.nccl

        version = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def _nvidia_smi(field: str) -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def agreement_section(device: str, tokenizer) -> dict:
    """The tests' tiny model (`model.tiny`) with a non-zero LoRA, one sampled batch of two
    consistency groups: log-probs (the trainer's layout) and `policy_update`'s loss, KL and
    gradient norm on CPU fp32 (the reference) and on `device` in bf16, from identical weights."""
    import torch
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from components.config import Params
    from components.contracts.rollouts import GroupBatch, Rollout
    from components.generation.sampling import SamplingConfig, TransformersEngine
    from components.grpo.distributed import DistContext
    from components.grpo.update import policy_update, precision_context
    from components.models.logprobs import completion_logprobs, pack, pack_shared, shared_prompt_logprobs
    from components.models.lora import attach_lora

    params = Params()
    shape = ModelShape(**params.model.tiny.model_dump())
    base = random_model(shape, tokenizer, "float32", "cpu", seed=0, initializer_range=AGREEMENT_INIT_RANGE)
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    model = attach_lora(base, params.lora)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # B = 0 would make the policy the reference: give the adapter weights
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    lora_state = {k: v.clone() for k, v in get_peft_model_state_dict(model).items()}

    groups = consistency_groups(2)
    prompts = [m.text for g in groups for m in g.members]
    k, new_tokens = 4, 16
    samples = TransformersEngine(model, tokenizer, batch_size=64, show_progress=False).generate(
        prompts, SamplingConfig(n=k, max_new_tokens=new_tokens, temperature=1.0, top_p=1.0, seed=0)
    )
    members = [(gi, g, m) for gi, g in enumerate(groups) for m in g.members]
    rollouts = [
        Rollout.of(gi, g, m, completion=s.text, prompt_ids=s.prompt_ids, completion_ids=s.completion_ids, truncated=s.truncated)
        for (gi, g, m), per_prompt in zip(members, samples)
        for s in per_prompt
    ]
    batch = GroupBatch(groups, rollouts)
    advantages = torch.randn(len(rollouts), generator=generator)
    train_cfg = params.train.model_copy(
        update={"max_new_tokens": new_tokens, "temperature": 1.0, "rows_per_forward": 0, "num_iterations": 1}
    )
    packer, forward = (pack_shared, shared_prompt_logprobs) if train_cfg.share_prompts else (pack, completion_logprobs)
    packed = packer(rollouts, tokenizer.pad_token_id)
    mask = packed.completion_mask

    def run(where: str, precision: str, weights: str) -> dict:
        """The trainer's way: base weights in `weights` (model.dtype), a fresh LoRA on them, here given
        the same adapter tensors, on `where`."""
        b = random_model(shape, tokenizer, "float32", "cpu", seed=0, initializer_range=AGREEMENT_INIT_RANGE)
        b.load_state_dict(base_state)
        b = b.to(getattr(torch, weights))
        m = attach_lora(b, params.lora)
        set_peft_model_state_dict(m, lora_state)
        m = m.to(where)
        cfg = train_cfg.model_copy(update={"precision": precision})
        with torch.no_grad(), precision_context(precision, torch.device(where)):
            logp = forward(m, packed.to(where), cfg.temperature).logp.float().cpu()
        m.train()
        optimizer = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
        ctx = DistContext(device=torch.device(where))
        update = policy_update(m, m, optimizer, None, batch, advantages, cfg, tokenizer.pad_token_id, ctx)
        return {"logp": logp, "loss": update["loss"], "kl": update["kl"], "grad_norm": update["grad_norm"]}

    reference = run("cpu", "fp32", "float32")
    ref_logp = reference["logp"][mask]
    variants = {}
    for name, (precision, weights, (max_tol, mean_tol, loss_tol)) in AGREEMENT_VARIANTS.items():
        got = run(device, precision, weights)
        delta = (got["logp"][mask] - ref_logp).abs()
        d_loss = abs(got["loss"] - reference["loss"])
        variants[name] = {
            "device": device,
            "precision": precision,
            "weights": weights,
            "max_abs_dlogp": float(delta.max()),
            "mean_abs_dlogp": float(delta.mean()),
            "loss": got["loss"],
            "abs_dloss": d_loss,
            "kl": got["kl"],
            "grad_norm": got["grad_norm"],
            "grad_norm_rel_diff": abs(got["grad_norm"] - reference["grad_norm"]) / max(abs(reference["grad_norm"]), 1e-12),
            "tolerance": {"max_abs_dlogp": max_tol, "mean_abs_dlogp": mean_tol, "abs_dloss": loss_tol},
            "pass": bool(float(delta.max()) <= max_tol and float(delta.mean()) <= mean_tol and d_loss <= loss_tol),
        }
    return {
        "model": {
            "shape": asdict(shape),
            "vocab_size": len(tokenizer),
            "initializer_range": AGREEMENT_INIT_RANGE,
            "lora": lora_settings()[0],
        },
        "batch": {
            "rows": len(rollouts),
            "completion_tokens": int(mask.sum()),
            "layout": "shared prompts" if train_cfg.share_prompts else "packed",
            "beta": train_cfg.beta,
            "loss_type": train_cfg.loss_type,
        },
        "reference": {
            "device": "cpu",
            "precision": "fp32",
            "loss": reference["loss"],
            "kl": reference["kl"],
            "grad_norm": reference["grad_norm"],
            "logp_mean": float(ref_logp.mean()),
            "logp_min": float(ref_logp.min()),
        },
        "variants": variants,
        "pass": all(v["pass"] for v in variants.values()),
    }


def train_section(name: str, size: RunSize, device: str, tokenizer, work: Path, deadline: float) -> dict:
    """`size.steps` GRPO steps of the `name` shape through groupwise's trainer on `device`."""
    from components.grpo import trainer

    dtype, precision = "bfloat16", "bf16"
    model_dir = work / f"{name}-base"
    out = {
        "model": name,
        "shape": asdict(SHAPES[name]),
        "size": asdict(size),
        "samples_per_step": size.samples_per_step,
        "dtype": dtype,
        "precision": precision,
        "rollouts": "transformers",
        "lora": lora_settings()[0],
    }
    try:
        out["build"] = write_model_dir(model_dir, SHAPES[name], tokenizer, dtype, device)
        params = train_params(size, device, dtype, precision)
        out["beta"] = params.train.beta
        captured: list[dict] = []

        def on_step(step: int, metrics: dict) -> None:
            captured.append(dict(metrics))
            if time.monotonic() > deadline and step < size.steps:
                raise BudgetExceeded(f"stopped after step {step} of {size.steps}: the run's time budget (--budget-s) ran out")

        reset_memory(device)
        started = time.perf_counter()
        timer = PhaseTimer(device)
        try:
            with timer:
                trainer.train(
                    params,
                    consistency_groups(size.groups_per_step * size.steps),
                    model_dir,
                    work / f"{name}-checkpoint",
                    on_step=on_step,
                    show_progress=False,
                    shuffle=False,
                )
        except BudgetExceeded as exc:
            out["status"], out["reason"] = "partial", str(exc)
        out["train_wall_s"] = time.perf_counter() - started
        out["memory"] = peak_memory(device)
        rows = [_step_row(m, timer.steps[i] if i < len(timer.steps) else {}) for i, m in enumerate(captured)]
        out["steps"] = rows
        out["outside_steps_s"] = out["train_wall_s"] - sum(r["step_s"] for r in rows)  # load, move, engine, checkpoint
        out["steady"] = steady(rows)
        last = captured[-1] if captured else {}
        out["final"] = {k: last.get(k) for k in ("reward_mean", "kl", "loss", "grad_norm", "token_entropy", "completion_length_mean")}
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
        shutil.rmtree(work / f"{name}-checkpoint", ignore_errors=True)
    return out


def _step_row(metrics: dict, phases: dict) -> dict:
    step_s, gen_s = metrics["step_time_s"], metrics["generation_time_s"]
    update_s = phases.get("update", 0.0)
    reference_s, optimizer_s = phases.get("reference", 0.0), phases.get("optimizer", 0.0)
    tokens = metrics["tokens"]
    return {
        "step": int(metrics["step"]),
        "step_s": step_s,
        "generation_s": gen_s,
        "reward_s": phases.get("reward", 0.0),
        "reference_s": reference_s,
        "forward_backward_s": update_s - reference_s - optimizer_s,
        "optimizer_s": optimizer_s,
        "other_s": step_s - gen_s - phases.get("reward", 0.0) - update_s,
        "samples": metrics["samples"],
        "completion_tokens": tokens,
        "tokens_per_s": tokens / step_s,
        "generation_tokens_per_s": tokens / gen_s if gen_s else None,
        "samples_per_s": metrics["samples_per_s"],
    }


def plain_section(name: str, size: RunSize, device: str, tokenizer) -> dict:
    """The same shape and batch without groupwise: peft LoRA (the project's r, alpha, targets),
    transformers `generate` (every sample exactly max_new_tokens long), then one forward/backward of
    an advantage-weighted log-prob loss over the whole batch and an AdamW step, per step."""
    import torch
    from peft import LoraConfig, get_peft_model

    sync = synchronizer(device)
    lora, lora_from = lora_settings()
    reset_memory(device)
    t0 = time.perf_counter()
    base = random_model(SHAPES[name], tokenizer, "bfloat16", device)
    peft_cfg = LoraConfig(
        r=lora["r"],
        lora_alpha=lora["lora_alpha"],
        lora_dropout=lora["dropout"],
        target_modules=list(lora["target_modules"]),
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base, peft_cfg)
    build_s = time.perf_counter() - t0
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5)
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
        for pair in prompt_texts(size.groups_per_step)
        for t in pair
    ]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
    k, new = size.samples_per_prompt, size.max_new_tokens
    autocast = torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    rows = []
    for step in range(1, size.steps + 1):
        torch.manual_seed(step)
        sync()
        t_start = time.perf_counter()
        model.eval()
        with torch.no_grad(), autocast:
            sequences = model.generate(
                **enc,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=new,
                min_new_tokens=new,
                num_return_sequences=k,
                pad_token_id=tokenizer.pad_token_id,
            )
        sync()
        t_gen = time.perf_counter()
        model.train()
        completion = sequences[:, enc["input_ids"].shape[1] :]
        attention = torch.cat([enc["attention_mask"].repeat_interleave(k, dim=0), torch.ones_like(completion)], dim=1)
        advantages = torch.randn(completion.shape[0], 1, device=device)
        with autocast:
            logits = model(input_ids=sequences, attention_mask=attention, logits_to_keep=completion.shape[1] + 1).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        loss = -(advantages * logp).mean()
        loss.backward()
        sync()
        t_fb = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        t_end = time.perf_counter()
        tokens = int(completion.numel())
        rows.append(
            {
                "step": step,
                "step_s": t_end - t_start,
                "generation_s": t_gen - t_start,
                "forward_backward_s": t_fb - t_gen,
                "optimizer_s": t_end - t_fb,
                "samples": completion.shape[0],
                "completion_tokens": tokens,
                "tokens_per_s": tokens / (t_end - t_start),
                "generation_tokens_per_s": tokens / (t_gen - t_start),
                "loss": loss.item(),
            }
        )
        del logits, logp, loss, sequences
    out = {
        "model": name,
        "shape": asdict(SHAPES[name]),
        "size": asdict(size),
        "samples_per_step": size.samples_per_step,
        "dtype": "bfloat16",
        "precision": "bf16 autocast",
        "lora": lora,
        "lora_from": lora_from,
        "build_s": build_s,
        "rollouts": "transformers generate",
        "steps": rows,
        "steady": steady(rows),
        "memory": peak_memory(device),
    }
    del model, base, optimizer
    return out


# name -> (decoder, PyTorch mode) of decode_section: `model.generate` (the plain sections' rollouts) or
# groupwise's TransformersEngine; the mode None (PyTorch's default kernels) or the trainer's
# deterministic_algorithms() with fill_uninitialized_memory True (as in every training step) or False
DECODE_VARIANTS = {
    "generate": ("generate", None),
    "engine": ("engine", None),
    "engine_deterministic": ("engine", True),
    "engine_deterministic_no_fill": ("engine", False),
}


def decode_section(name: str, size: RunSize, device: str, tokenizer) -> dict:
    """Where the transformers rollouts' time goes: one step's rollouts of the `name` shape (bf16 weights,
    bf16 autocast, the project's LoRA with B = 0) decoded by `model.generate` and by groupwise's
    TransformersEngine with and without the trainer's deterministic algorithms, and with them but
    without their filling of every new tensor (`torch.utils.deterministic.fill_uninitialized_memory`).
    The same prompts and token count in each (`model.generate` with min_new_tokens; random weights never
    sample EOS early); one short warm-up call first, then one timed call each, synchronized."""
    import torch

    from components.generation.sampling import SamplingConfig, TransformersEngine, chat_prompt
    from components.grpo.determinism import deterministic_algorithms
    from components.grpo.update import precision_context
    from components.models.lora import attach_lora

    params = train_params(size, device, "bfloat16", "bf16")
    sync = synchronizer(device)
    model = attach_lora(random_model(SHAPES[name], tokenizer, "bfloat16", device), params.lora)
    model.eval()
    prompts = [t for pair in prompt_texts(size.groups_per_step) for t in pair]
    cfg = params.train
    sampling = SamplingConfig(
        n=cfg.samples_per_prompt, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p, seed=0
    )
    engine = TransformersEngine(model, tokenizer, batch_size=size.samples_per_step, show_progress=False)
    enc = tokenizer([chat_prompt(tokenizer, t) for t in prompts], return_tensors="pt", padding=True, add_special_tokens=False).to(device)

    def generate(max_new: int) -> int:
        sequences = model.generate(
            **enc, do_sample=True, temperature=cfg.temperature, top_k=0, top_p=cfg.top_p, max_new_tokens=max_new,
            min_new_tokens=max_new, num_return_sequences=cfg.samples_per_prompt, pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
        return int(sequences[:, enc["input_ids"].shape[1] :].numel())

    def engine_tokens(max_new: int) -> int:
        samples = engine.generate(prompts, replace(sampling, max_new_tokens=max_new))
        return sum(len(s.completion_ids) for row in samples for s in row)

    @contextlib.contextmanager
    def mode(fill: bool | None):
        """PyTorch's default kernels (None), or the trainer's deterministic ones filling new tensors or not."""
        if fill is None:
            yield
            return
        fill_before = torch.utils.deterministic.fill_uninitialized_memory
        torch.utils.deterministic.fill_uninitialized_memory = fill
        try:
            with deterministic_algorithms():
                yield
        finally:
            torch.utils.deterministic.fill_uninitialized_memory = fill_before

    out: dict = {"model": name, "samples": size.samples_per_step, "max_new_tokens": cfg.max_new_tokens, "top_p": cfg.top_p, "variants": {}}
    with torch.no_grad(), precision_context("bf16", torch.device(device)):
        engine_tokens(4), generate(4)  # warm-up: CUDA context, kernels, allocator
        for variant, (decoder, fill) in DECODE_VARIANTS.items():
            decode = {"generate": generate, "engine": engine_tokens}[decoder]
            with mode(fill):
                sync()
                started = time.perf_counter()
                tokens = decode(cfg.max_new_tokens)
                sync()
            seconds = time.perf_counter() - started
            out["variants"][variant] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}
    out["memory"] = peak_memory(device)
    return out


def torchrun_command(name: str, size: RunSize, device: str, out: Path, work: Path, budget_s: float) -> list[str]:
    """`torchrun --standalone --nproc-per-node 1` (as `python -m torch.distributed.run`) running
    this script's worker on the `name` shape."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "1",
        str(Path(__file__).resolve()),
        "--worker",
        "--worker-model",
        name,
        "--worker-size",
        json.dumps(asdict(size)),
        "--device",
        device,
        "--out",
        str(out),
        "--work",
        str(work),
        "--budget-s",
        f"{budget_s:.0f}",
    ]


def torchrun_section(name: str, size: RunSize, device: str, work: Path, timeout_s: float) -> dict:
    """torchrun as a subprocess, its output in a log file; the worker's JSON (rewritten after each
    of its parts) is the section's figures. At `timeout_s` torchrun gets SIGTERM (it stops its
    worker), then SIGKILL, and the worker (in a session of its own, torchrun's doing) is killed by
    the pid it wrote."""
    import signal

    out_json, log = work / f"torchrun-{name}.json", work / f"torchrun-{name}.log"
    command = torchrun_command(name, size, device, out_json, work / "torchrun", max(timeout_s - 20, 30))
    started = time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(out_json.with_suffix(".pid").read_text()), signal.SIGKILL)
            rc = None
    output = log.read_text(errors="replace") + ("" if rc is not None else f"\ntimed out after {timeout_s:.0f} s: stopped")
    worker = json.loads(out_json.read_text()) if out_json.is_file() else None
    out = {"command": " ".join(command[1:]), "returncode": rc, "wall_s": time.perf_counter() - started, "worker": worker}
    parts = {part: (worker or {}).get(part, {}).get("status") for part in ("collectives", "train")}
    out["success"] = rc == 0 and parts == {"collectives": "ok", "train": "ok"}
    if rc != 0 or worker is None or "failed" in parts.values():
        out["status"] = "failed"
        out["error"] = f"torchrun returned {rc}; worker parts {parts}" + ("" if worker else "; no worker JSON")
        out["output_tail"] = (output or "")[-3000:]
    elif parts["train"] != "ok":  # skipped (groupwise not importable) or partial (budget)
        out["status"], out["reason"] = parts["train"], (worker.get("train") or {}).get("reason")
    return out


def torchrun_worker(args) -> int:
    """Inside torchrun: the process group (nccl on a GPU) with an all-reduce, an object all-gather
    and a DDP backward, then groupwise's trainer under torchrun's environment (LOCAL_RANK set)."""
    import torch
    import torch.distributed as dist

    Path(args.out).with_suffix(".pid").write_text(str(os.getpid()))  # for the parent, should torchrun outlive its budget
    size = RunSize(**json.loads(args.worker_size))
    setup_process(args.device)
    env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    result: dict = {"env": env}
    where = f"cuda:{int(env['LOCAL_RANK'] or 0)}" if args.device.startswith("cuda") else "cpu"
    backend = "nccl" if where.startswith("cuda") else "gloo"
    deadline = time.monotonic() + args.budget_s

    def save() -> None:
        Path(args.out).write_text(json.dumps(result, indent=2, default=str))

    with section(result, "collectives"):
        t0 = time.perf_counter()
        if where.startswith("cuda"):
            torch.cuda.set_device(where)
        dist.init_process_group(backend=backend)
        values = torch.full((4,), float(dist.get_rank() + 1), device=where)
        dist.all_reduce(values)
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, {"rank": dist.get_rank()})
        layer = torch.nn.Linear(16, 16).to(where)
        ddp = torch.nn.parallel.DistributedDataParallel(layer, device_ids=[torch.device(where).index] if backend == "nccl" else None)
        ddp(torch.randn(8, 16, device=where)).square().sum().backward()
        synchronizer(where)()
        result["collectives"].update(
            backend=backend,
            world_size=dist.get_world_size(),
            all_reduce=values.tolist(),
            all_gather=gathered,
            ddp_grad_norm=float(layer.weight.grad.norm()),
            seconds=time.perf_counter() - t0,
        )
    if dist.is_initialized():  # the trainer runs without it (WORLD_SIZE 1: its single-process path)
        dist.destroy_process_group()
    save()
    if (error := groupwise_import_error()) is not None:
        result["train"] = {"status": "skipped", "reason": f"groupwise cannot be imported ({error}); {WHEELS_HINT}"}
    else:
        with section(result, "train"):
            # train.device `cuda`: under torchrun the trainer resolves it to cuda:LOCAL_RANK; WORLD_SIZE 1 runs one process
            result["train"].update(
                train_section(args.worker_model, size, args.device, byte_pair_tokenizer(vocab_size(args.device)), Path(args.work), deadline)
            )
    save()
    return 0


@contextlib.contextmanager
def section(report: dict, name: str):
    """`report[name]`: the section's figures, status (ok, partial, failed) and seconds; an exception
    is recorded (type, message, traceback tail) and does not reach the caller."""
    entry = report.setdefault(name, {})
    started = time.perf_counter()
    try:
        yield entry
    except Exception as exc:  # one section's failure must not stop the others
        entry["status"] = "failed"
        entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        entry["traceback"] = traceback.format_exc()[-4000:]
    else:
        entry.setdefault("status", "ok")
    finally:
        entry["seconds"] = time.perf_counter() - started


# ---- the run -----------------------------------------------------------------------------------


def summary_lines(report: dict) -> list[str]:
    """A few lines for the terminal: one per section, one per agreement variant."""
    m = report["machine"]
    lines = [
        f"gpu_check on {m.get('gpu') or 'CPU'} ({report['device']}{', quick' if report['quick'] else ''}): torch {m.get('torch')}"
        f" (CUDA {m.get('torch_cuda')}), {report.get('wall_s', 0):.0f} s"
    ]
    for name, s in report["sections"].items():
        detail, extra = s.get("reason") or s.get("error") or "", []
        if name == "agreement" and "variants" in s:
            detail = f"CPU fp32 against {report['device']}: {'PASS' if s['pass'] else 'FAIL'}"
            for v, x in s["variants"].items():
                tol = x["tolerance"]
                extra.append(
                    f"    {v:<14} max|Δlogp| {x['max_abs_dlogp']:.2e} (≤ {tol['max_abs_dlogp']}), mean {x['mean_abs_dlogp']:.2e} "
                    f"(≤ {tol['mean_abs_dlogp']}), |Δloss| {x['abs_dloss']:.1e} (≤ {tol['abs_dloss']}): {'pass' if x['pass'] else 'FAIL'}"
                )
        elif s.get("steady"):
            detail = _steady_line(s)
        elif name.startswith("decode") and "variants" in s:
            detail = ", ".join(f"{v} {x['tokens_per_s']:.0f} tok/s" for v, x in s["variants"].items())
        elif name.startswith("torchrun") and "returncode" in s:
            worker = s.get("worker") or {}
            train = worker.get("train") or {}
            detail = f"rc {s['returncode']}, {s['wall_s']:.0f} s; collectives {(worker.get('collectives') or {}).get('status')}"
            detail += f"; train {train.get('status')}" + (f": {_steady_line(train)}" if train.get("steady") else "")
        lines.append(f"  {name:<22} {s.get('status', '?'):<8} {s.get('seconds', 0):6.1f} s  {detail}"[:400])
        lines.extend(extra)
    return lines


def _steady_line(s: dict) -> str:
    st, mem = s["steady"], (s.get("memory") or {}).get("peak_allocated_gib")
    keys = ("generation_s", "reward_s", "reference_s", "forward_backward_s", "optimizer_s")
    phases = ", ".join(f"{k.removesuffix('_s')} {st[k]:.2f}" for k in keys if k in st)
    return f"step {st['step_s']:.2f} s ({phases}), {st['tokens_per_s']:.0f} tok/s" + (f", peak {mem:.1f} GiB" if mem else "")


def setup_process(device: str) -> None:
    """Offline, no progress bars; on the CPU one torch thread (tiny models: two threads spinning
    beside another job on a 2-core machine ran the dry run 20x slower)."""
    import torch
    from transformers.utils import logging as hf_logging

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    hf_logging.disable_progress_bar()
    if device == "cpu":
        torch.set_num_threads(1)


def run(args) -> int:
    import torch

    setup_process(args.device)
    started_wall = time.perf_counter()
    deadline = time.monotonic() + args.budget_s
    device = args.device
    report: dict = {
        "schema": 1,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "quick": args.quick,
        "budget_s": args.budget_s,
        "vocab_size": vocab_size(device),
        "method": "random-weight models of the SmolLM2 architecture built from their configs, a byte-pair tokenizer built in "
        "process, consistency groups (one question asked as a woman and as a man), groupwise's trainer with transformers rollouts",
        "torch_threads": torch.get_num_threads(),
        "machine": {},
        "sections": {},
    }
    out_path = Path(args.out)

    def save(done: str | None = None) -> None:
        """Rewrite the JSON (a run killed at its limit keeps what it finished); `done`: say so."""
        report["wall_s"] = time.perf_counter() - started_wall
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=2, default=str))
        if done is not None:
            entry = sections.get(done, {})
            print(f"[{report['wall_s']:.0f} s] {done}: {entry.get('status')} {entry.get('error') or entry.get('reason') or ''}", flush=True)

    sections = report["sections"]
    with section(report, "machine"):
        report["machine"].update(machine_section(device))
    save()
    if device.startswith("cuda") and not torch.cuda.is_available():
        report["error"] = "--device cuda: torch sees no CUDA device here (use --device cpu for the dry run)"
        save()
        print(report["error"], file=sys.stderr)
        return 2

    gw_error = groupwise_import_error()
    tokenizer = byte_pair_tokenizer(vocab_size(device))
    sizes = plan(device, args.quick)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)

    def fits(name: str, estimate_s: float) -> bool:
        left = deadline - time.monotonic()
        if device.startswith("cuda") and left < estimate_s:
            sections[name] = {"status": "skipped", "reason": f"{left:.0f} s of the budget left, the section needs about {estimate_s:.0f} s"}
            return False
        return True

    def needs_groupwise(name: str) -> bool:
        if gw_error is not None:
            sections[name] = {"status": "skipped", "reason": f"groupwise cannot be imported here ({gw_error}); {WHEELS_HINT}"}
            return False
        return True

    try:
        if "agreement" in args.sections and needs_groupwise("agreement") and fits("agreement", 30):
            with section(sections, "agreement") as entry:
                entry.update(agreement_section(device, tokenizer))
            save("agreement")
        if "train" in args.sections:
            for name, size in sizes.items():
                key = f"train_{name}"
                if needs_groupwise(key) and fits(key, size.estimate_s):
                    with section(sections, key) as entry:
                        entry.update(train_section(name, size, device, tokenizer, work, deadline))
                    reset_memory(device)
                save(key)
        if "torchrun" in args.sections:
            name = next(iter(sizes))
            key = f"torchrun_{name}"
            size = replace(sizes[name], steps=2)
            if device == "cpu" and not args.torchrun_on_cpu:
                sections[key] = {
                    "status": "skipped",
                    "reason": "NCCL needs a CUDA device (--device cpu; --torchrun-on-cpu runs it with gloo)",
                }
            elif fits(key, 60 + size.estimate_s):
                with section(sections, key) as entry:
                    timeout = max(60.0, deadline - time.monotonic() - 10) if device.startswith("cuda") else 300.0
                    entry.update(torchrun_section(name, size, device, work, timeout))
            save(key)
        if "plain" in args.sections:
            for name, size in sizes.items():
                key = f"plain_{name}"
                if fits(key, size.estimate_s / 2):
                    with section(sections, key) as entry:
                        entry.update(plain_section(name, size, device, tokenizer))
                    reset_memory(device)
                save(key)
        if "decode" in args.sections:
            name = next(iter(sizes))
            key = f"decode_{name}"
            if needs_groupwise(key) and fits(key, sizes[name].estimate_s * 0.8):
                with section(sections, key) as entry:
                    entry.update(decode_section(name, sizes[name], device, tokenizer))
                reset_memory(device)
            save(key)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
        save()
    for line in summary_lines(report):
        print(line)
    print(f"written: {out_path}")
    failed = [k for k, s in sections.items() if s.get("status") == "failed"]
    agreement_failed = sections.get("agreement", {}).get("pass") is False
    return 1 if failed or agreement_failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="gpu_check.json", help="the JSON report (rewritten after each section)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None, help="cuda (default when torch sees a GPU) or cpu: the dry run")
    parser.add_argument("--quick", action="store_true", help="fewer steps, groups and tokens")
    parser.add_argument("--budget-s", type=float, default=540.0, help="seconds for the whole run; sections that no longer fit are skipped")
    parser.add_argument(
        "--sections",
        type=lambda s: s.split(","),
        default=list(DEFAULT_SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (default {','.join(DEFAULT_SECTIONS)})",
    )
    parser.add_argument("--torchrun-on-cpu", action="store_true", help="--device cpu: run the torchrun section with gloo")
    parser.add_argument("--work", help="a folder for the model folders (default: a temporary one, removed)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-size", help=argparse.SUPPRESS)
    parser.add_argument("--worker-model", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.sections) - set(SECTIONS)):
        parser.error(f"--sections: unknown {unknown}; choose from {','.join(SECTIONS)}")
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.worker:
        return torchrun_worker(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
