"""Bitwise-repeatable training: the same params, groups and machine give the same weights, run after run.

Seeds fix what is drawn (`trainer.seed_everything`, the engines' sampling seeds), not the order in which
floats are added. PyTorch's default kernels for a few backward ops accumulate with atomic adds, whose
order follows thread timing. On a CPU with more than one thread, `index_put_(accumulate=True)` (the
backward of advanced indexing) runs in parallel with atomic float adds. One instance sits in every
training step: the KV-cache selection that lets a prompt's K completions share its forward
(`components.models.logprobs.shared_prompt_logprobs`, `DynamicCache.batch_select_indices`). Without the
ordered kernels two runs of one step end with gradients that differ in their last bits; a few steps
later a sampled token differs, and from there two runs of one configuration drift apart.

`torch.use_deterministic_algorithms` selects the ordered implementations (sorted accumulation on CPU;
on CUDA also cuBLAS's fixed workspace, `CUBLAS_WORKSPACE_CONFIG`, set here when unset). `warn_only`: an
op with no ordered implementation warns once instead of stopping a run. The setting is the process's
global one, so it is restored when training returns.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

CUBLAS_WORKSPACE = ":4096:8"  # what cuBLAS needs for repeatable results (PyTorch's reproducibility notes)


@contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """PyTorch's deterministic algorithms for the duration (module docstring); usable as a decorator."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
