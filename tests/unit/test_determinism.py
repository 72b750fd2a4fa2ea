"""Training repeats itself bit for bit on one machine (components/grpo/determinism.py).

The case that broke it: the backward of the KV-cache selection by which K completions share one
prompt's forward (`DynamicCache.batch_select_indices`, advanced indexing) accumulates with parallel
atomic float adds in PyTorch's default CPU kernel once a cache holds more than a grain of elements and
more than one thread runs, so two runs of a step differed in their gradients' last bits."""

import hashlib

import pytest
import torch
from transformers import DynamicCache

from components.grpo.determinism import deterministic_algorithms
from components.grpo.trainer import train
from tests.grpo_data import consistency_groups, tiny_params


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the parallel kernel needs more than one thread
    yield
    torch.set_num_threads(before)


def _selection_gradient() -> str:
    """The SHA-256 of the gradient that a shared-prompt cache selection sends back to the prompts' keys:
    2 prompts (3 KV heads, 620 positions of 64: above PyTorch's parallel grain) read by 6 completions."""
    torch.manual_seed(0)
    keys = torch.randn(2, 3, 620, 64, requires_grad=True)
    weights = torch.randn(6, 3, 620, 64)
    cache = DynamicCache()
    cache.update(keys, keys.detach().clone(), layer_idx=0)
    cache.batch_select_indices(torch.tensor([0, 0, 1, 1, 1, 1]))
    (cache.layers[0].keys * weights).sum().backward()
    return hashlib.sha256(keys.grad.numpy().tobytes()).hexdigest()


def test_the_shared_prompt_cache_selection_sends_back_the_same_gradient_every_time_under_training_settings(two_threads):
    with deterministic_algorithms():
        assert len({_selection_gradient() for _ in range(30)}) == 1


def test_training_runs_with_ordered_kernels_and_gives_the_process_its_setting_back(tiny_model_dir, tmp_path):
    before = torch.are_deterministic_algorithms_enabled()
    seen: list[bool] = []
    train(tiny_params(), consistency_groups(3), tiny_model_dir, tmp_path / "ckpt", show_progress=False,
          on_step=lambda step, metrics: seen.append(torch.are_deterministic_algorithms_enabled()))  # fmt: skip
    assert seen == [True, True]
    assert torch.are_deterministic_algorithms_enabled() == before
