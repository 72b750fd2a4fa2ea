"""Data-parallel training context: whole groups per rank, global sums across ranks.

Launch with torchrun (or `accelerate launch`), which sets RANK / WORLD_SIZE / MASTER_ADDR:

    torchrun --standalone --nproc-per-node 2 $(which groupwise) train          # CPU: gloo
    torchrun --nproc-per-node 8 $(which groupwise) train                       # GPUs: nccl

Each step's groups are dealt out whole to the ranks (a group's rewards and advantages are computed
on one rank, over all its samples); loss weights are computed on the global batch, and gradients are
all-reduced by torch DDP. Without those variables everything runs in one process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

import torch
import torch.distributed as dist

from components.config import ParamsError

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")  # where collectives run: this rank's GPU under nccl

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's contiguous block of whole items (groups); every rank gets the same count."""
        if len(items) % self.world_size:
            raise ParamsError(
                f"{len(items)} groups per step cannot be split evenly over {self.world_size} ranks: "
                "make train.groups_per_step a multiple of the number of processes"
            )
        per_rank = len(items) // self.world_size
        return list(items[self.rank * per_rank : (self.rank + 1) * per_rank])

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def all_reduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return values
        out = values.to(self.device, copy=True)
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.to(values.device)

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def init_from_env(device: str = "auto") -> DistContext:
    """Join the process group torchrun set up (nccl when this rank's `device` is a GPU, else gloo);
    one process otherwise. `device` is `train.device` (`components.models.device.resolve_device`)."""
    from components.models.device import dist_backend, resolve_device

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext(device=resolve_device(device))
    placed = resolve_device(device)
    if placed.type == "cuda":
        torch.cuda.set_device(placed)
    if not dist.is_initialized():
        dist.init_process_group(backend=dist_backend(placed))
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), device=placed)
