"""Where tensors live: one policy for training, evaluation and embeddings.

`train.device` is `auto | cpu | cuda | cuda:N`. `auto` is the local GPU when torch sees one, else the
CPU. Under torchrun (`LOCAL_RANK` set) a bare `cuda` or `auto` means this process's own GPU,
`cuda:LOCAL_RANK`, as DDP with nccl expects; an explicit `cuda:N` is taken as written.
"""

from __future__ import annotations

import os
import re

import torch

from components.contracts.errors import UserError

DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"


class DeviceUnavailableError(UserError, ValueError):
    """A CUDA device was asked for that this machine does not have."""


def local_rank() -> int | None:
    """torchrun's LOCAL_RANK, or None outside torchrun."""
    value = os.environ.get("LOCAL_RANK")
    return int(value) if value not in (None, "") else None


def resolve_device(spec: str = "auto", rank: int | None = None) -> torch.device:
    """The torch.device for `spec` on this machine (`rank`: LOCAL_RANK, read from the environment
    when None); DeviceUnavailableError naming the spec and what exists when CUDA is missing."""
    if not re.match(DEVICE_PATTERN, spec):
        raise DeviceUnavailableError(f"device {spec!r}: expected auto, cpu, cuda or cuda:N")
    rank = local_rank() if rank is None else rank
    has_cuda = torch.cuda.is_available()
    if spec == "cpu" or (spec == "auto" and not has_cuda):
        return torch.device("cpu")
    count = torch.cuda.device_count() if has_cuda else 0
    index = int(spec.split(":")[1]) if ":" in spec else (rank or 0)
    if index >= count:
        what = f"{count} CUDA device(s)" if count else "no CUDA device (torch.cuda.is_available() is False)"
        raise DeviceUnavailableError(f"device {spec!r} (index {index}): this machine has {what}; use train.device: cpu or auto")
    return torch.device("cuda", index)


def dist_backend(device: torch.device) -> str:
    """nccl for GPUs, gloo for the CPU."""
    return "nccl" if device.type == "cuda" else "gloo"
