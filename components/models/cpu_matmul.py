"""The CPU kernels of the trainer's frozen fp32 matmuls (`train.cpu_matmul`).

torch runs an fp32 `nn.Linear` on a CPU through MKL's SGEMM. On AMD CPUs MKL takes its AVX2 path
even where the CPU has AVX-512, while torch's own oneDNN (`torch.ops.mkldnn._linear_pointwise`, the
kernel behind Inductor's CPU linear fusions) runs AVX-512 there: on a 2-core AMD EPYC (Zen 5) it
computes the update's GEMM shapes at ≈ 450 GFLOP/s against MKL's ≈ 190, and a forward and backward of
SmolLM2-135M with its LoRA in 4.1 s instead of 6.2 s (docs/benchmarks.md). Both compute y = x Wᵀ + b
in fp32; their sums run in another order, so results agree to fp32 rounding (≈ 1e-6 relative), not to
the bit.

Written by hand because torch gives that kernel no autograd formula (`torch.utils.mkldnn`'s modules are
inference only) and the trainer needs the input gradient through every frozen layer: dL/dx = g W,
the same kernel on the transposed view of W (no copy, so an in-place change of W, such as merging a
LoRA for rollouts, is seen). Frozen weights only: their gradient is never needed; LoRA's own
layers stay torch's.
"""

from __future__ import annotations

import torch

KERNELS = ("torch", "onednn")


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (..., in) @ weight (out, in)ᵀ + bias by oneDNN's fp32 inner product."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")
    return out.reshape(*x.shape[:-1], weight.shape[0])


class _FrozenLinear(torch.autograd.Function):
    """y = x Wᵀ + b with W and b frozen; backward: dL/dx = g W (oneDNN, on Wᵀ's view)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(weight)
        return _linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        return _linear(grad, weight.t(), None), None, None


class OneDnnFrozenLinear(torch.nn.Linear):
    """An `nn.Linear` whose weight is frozen, computed by oneDNN in fp32 (`use_onednn_linears` swaps
    the class of a model's frozen linears in place; parameters and state dict are unchanged)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.requires_grad or self.weight.dtype != torch.float32 or x.dtype != torch.float32:
            return super().forward(x)  # a weight made trainable or cast: torch's own path
        return _FrozenLinear.apply(x, self.weight, self.bias)


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's CPU linear (x86 and Arm wheels do)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_applies(kernel: str, precision: str, device_type: str) -> bool:
    """Whether `train.cpu_matmul` swaps anything: onednn, in fp32 (bf16 autocast already runs oneDNN's bf16 GEMM),
    on a CPU, with a torch build that has the kernel."""
    return kernel == "onednn" and precision == "fp32" and device_type == "cpu" and onednn_available()


def use_onednn_linears(model: torch.nn.Module) -> int:
    """Swap every frozen fp32 `nn.Linear` of a CPU model (the base layers under LoRA, the MLPs, the LM
    head) to `OneDnnFrozenLinear`; returns how many. Trainable linears (LoRA's A and B) stay as they are."""
    swapped = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if type(module) is torch.nn.Linear and not weight.requires_grad and weight.dtype == torch.float32 and weight.device.type == "cpu":
            module.__class__ = OneDnnFrozenLinear
            swapped += 1
    return swapped


def apply_cpu_matmul(model: torch.nn.Module, kernel: str, precision: str, device: torch.device) -> int:
    """`train.cpu_matmul` on the trainer's model: oneDNN for its frozen linears where `onednn_applies`; returns how
    many linears it swapped."""
    if kernel not in KERNELS:
        raise ValueError(f"train.cpu_matmul: {kernel!r} is not one of {', '.join(KERNELS)}")
    return use_onednn_linears(model) if onednn_applies(kernel, precision, device.type) else 0
