"""train.cpu_matmul: oneDNN for the trainer's frozen fp32 linears computes what torch's F.linear does, to fp32 rounding,
with the input gradient through them, and only where asked (CPU, fp32, frozen weights)."""

from __future__ import annotations

import pytest
import torch

from components import machine
from components.config import Params
from components.config.migrations import with_former_defaults
from components.models.cpu_matmul import OneDnnFrozenLinear, apply_cpu_matmul, onednn_available, use_onednn_linears

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN linear")
CPU = torch.device("cpu")


def _frozen_linear(in_features: int, out_features: int, bias: bool) -> torch.nn.Linear:
    layer = torch.nn.Linear(in_features, out_features, bias=bias)
    layer.requires_grad_(False)
    return layer


@pytest.mark.parametrize("bias", [False, True])
def test_the_onednn_linear_and_its_input_gradient_equal_torchs_to_fp32_rounding(bias):
    torch.manual_seed(0)
    layer = _frozen_linear(96, 160, bias)
    x = torch.randn(3, 37, 96, requires_grad=True)
    expected = torch.nn.functional.linear(x, layer.weight, layer.bias)
    (expected_grad,) = torch.autograd.grad(expected.square().sum(), x)
    use_onednn_linears(layer)
    assert type(layer) is OneDnnFrozenLinear
    y = layer(x)
    (grad,) = torch.autograd.grad(y.square().sum(), x)
    assert y.shape == expected.shape
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-4)


def test_an_in_place_change_of_the_weight_is_seen_as_a_merged_lora_changes_it():
    torch.manual_seed(1)
    layer = _frozen_linear(64, 64, False)
    use_onednn_linears(layer)
    x = torch.randn(5, 64, requires_grad=True)
    layer.weight.add_(0.5)
    y = layer(x)
    torch.testing.assert_close(y, x @ layer.weight.t(), rtol=1e-5, atol=1e-5)
    (grad,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(grad, torch.ones(5, 64) @ layer.weight, rtol=1e-5, atol=1e-5)


def test_repeated_passes_give_the_same_bits_under_the_trainers_deterministic_algorithms():
    torch.manual_seed(2)
    layer = _frozen_linear(128, 256, True)
    use_onednn_linears(layer)
    x = torch.randn(70, 128, requires_grad=True)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = [(y := layer(x), torch.autograd.grad(y.sum(), x)[0]) for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(previous)
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_a_lora_model_swaps_its_frozen_linears_only_and_trains_the_same_to_fp32_rounding(tiny_model_dir):
    from components.models.lora import attach_lora
    from components.models.provision import load_base_model

    def lora_gradients(kernel: str) -> tuple[int, int, dict[str, torch.Tensor], dict]:
        """(linears swapped, frozen torch linears left, LoRA gradients, the class names of LoRA's layers)."""
        torch.manual_seed(3)
        model = attach_lora(load_base_model(tiny_model_dir, "float32")[0], Params().lora)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)  # a trained adapter, so the LoRA path carries a gradient to A
        swapped = apply_cpu_matmul(model, kernel, "fp32", CPU)
        ids = torch.randint(0, model.config.vocab_size, (2, 24))
        logits = model(input_ids=ids).logits
        torch.log_softmax(logits, -1)[..., 0].sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
        left = sum(1 for m in model.modules() if type(m) is torch.nn.Linear and not m.weight.requires_grad)
        return (
            swapped,
            left,
            grads,
            {type(m).__name__ for name, m in model.named_modules() if "lora_" in name and isinstance(m, torch.nn.Linear)},
        )

    swapped, _, grads, lora_kinds = lora_gradients("onednn")
    none, frozen, expected, _ = lora_gradients("torch")
    assert none == 0 and swapped == frozen > 0
    assert lora_kinds == {"Linear"}  # LoRA's trainable A and B keep torch's path
    assert grads.keys() == expected.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("kernel", "precision", "device"), [("torch", "fp32", "cpu"), ("onednn", "bf16", "cpu"), ("onednn", "fp32", "meta")]
)
def test_it_applies_only_to_onednn_in_fp32_on_a_cpu(kernel, precision, device):
    model = torch.nn.Sequential(_frozen_linear(8, 8, False))
    assert apply_cpu_matmul(model, kernel, precision, torch.device(device)) == 0
    assert type(model[0]) is torch.nn.Linear
    with pytest.raises(ValueError, match="train.cpu_matmul: 'mkl' is not one of torch, onednn"):
        apply_cpu_matmul(model, "mkl", "fp32", CPU)


@pytest.mark.parametrize(
    ("cpuinfo", "kernel"),
    [
        ("model name\t: AMD EPYC 9B45\nflags\t\t: avx2 avx512f avx512_bf16\n", "onednn"),
        ("model name\t: AMD EPYC\nflags\t\t: avx2 fma\n", "torch"),  # AVX2 only: oneDNN's AVX2 kernels gain nothing measurable
        ("model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f amx_bf16\n", "torch"),  # MKL's AVX-512 path
    ],
)
def test_auto_takes_onednn_on_amd_cpus_with_avx512_only(tmp_path, monkeypatch, cpuinfo, kernel):
    info = tmp_path / "cpuinfo"
    info.write_text(cpuinfo)
    parse = machine._cpu
    monkeypatch.setattr(machine, "_cpu", lambda: parse(info))
    monkeypatch.setattr(machine, "_gpu_bf16", lambda: None)
    assert machine.resolve_cpu_matmul("auto") == kernel
    assert Params.model_validate({"train": {"cpu_matmul": "auto"}}).train.cpu_matmul == kernel
    assert machine.resolve_cpu_matmul("torch") == "torch"


def test_frozen_study_params_saved_before_the_field_keep_torchs_kernel():
    assert with_former_defaults({"train": {"steps": 3}})["train"]["cpu_matmul"] == "torch"
    assert with_former_defaults({"train": {"cpu_matmul": "onednn"}})["train"]["cpu_matmul"] == "onednn"
