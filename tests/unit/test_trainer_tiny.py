"""GRPO loop on the tiny random model: a checkpoint is written, weights move, runs are seeded."""

import json

import pytest
import torch
from safetensors.torch import load_file

from components.data.schema import PromptGroup
from components.grpo.checkpoint import ADAPTER_DIR, LOG_FILE, STATE_FILE
from components.grpo.trainer import group_schedule, train
from components.rewards.registry import REWARDS, register_reward
from tests.grpo_data import colour_group, consistency_groups, tiny_params


def groups(n: int = 3) -> list[PromptGroup]:
    return consistency_groups(n)


def test_group_schedule_keeps_groups_whole_and_is_seeded():
    gs = groups(3)
    a = group_schedule(gs, per_step=2, steps=4, seed=1)
    assert [len(s) for s in a] == [2, 2, 2, 2]
    assert [[g.group_id for g in s] for s in a] == [[g.group_id for g in s] for s in group_schedule(gs, 2, 4, 1)]
    with pytest.raises(ValueError, match="no training groups"):
        group_schedule([], 1, 1, 0)


def test_training_writes_checkpoint_and_is_reproducible(tiny_model_dir, tmp_path):
    params = tiny_params()
    first = train(params, groups(), tiny_model_dir, tmp_path / "a", show_progress=False)
    second = train(params, groups(), tiny_model_dir, tmp_path / "b", show_progress=False)

    for ckpt in (tmp_path / "a", tmp_path / "b"):
        assert (ckpt / ADAPTER_DIR / "adapter_model.safetensors").is_file()
        assert (ckpt / ADAPTER_DIR / "adapter_config.json").is_file()
    state = json.loads((tmp_path / "a" / STATE_FILE).read_text())
    assert state["steps"] == 2 and state["samples"] == 2 * 2 * 2 * 3
    assert len((tmp_path / "a" / LOG_FILE).read_text().strip().splitlines()) == 3  # header + 2 steps

    weights = load_file(tmp_path / "a" / ADAPTER_DIR / "adapter_model.safetensors")
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b), "LoRA B starts at 0 and must have moved"
    other = load_file(tmp_path / "b" / ADAPTER_DIR / "adapter_model.safetensors")
    assert all(torch.equal(weights[k], other[k]) for k in weights), "same params must give the same adapter"
    assert [h["reward_mean"] for h in first.history] == [h["reward_mean"] for h in second.history]
    # step 1 samples from the initial policy, which *is* the reference (LoRA B = 0): KL exactly 0
    assert first.history[0]["kl"] == 0.0 and first.history[1]["kl"] > 0.0
    for key in ("loss", "kl", "reward/entropy_helpfulness_mean", "reward/stability_mean", "advantage_std", "grad_norm"):
        assert key in first.final


def test_non_finite_reward_stops_before_any_checkpoint(tiny_model_dir, tmp_path):
    @register_reward("test_exploding", kind="sample")
    def exploding(rollout, group, cfg):
        return float("inf")

    params = tiny_params(steps=1)
    params = params.model_copy(update={"reward": params.reward.model_copy(update={"weights": {"test_exploding": 1.0}})})
    try:
        with pytest.raises(FloatingPointError, match="test_exploding"):
            train(params, groups(), tiny_model_dir, tmp_path / "ckpt", show_progress=False)
    finally:
        REWARDS.pop("test_exploding")
    assert not (tmp_path / "ckpt").exists()
    assert not list(tmp_path.glob(".ckpt-tmp-*"))


def test_gapo_frequency_reward_with_seed_grpo_trains_on_diversity_groups(tiny_model_dir, tmp_path):
    colour = colour_group("red", "green", "blue")
    params = tiny_params(steps=1, groups_per_step=1, samples_per_prompt=4)
    params = params.model_copy(
        update={
            "reward": params.reward.model_copy(update={"weights": {"frequency_aware": 1.0}}),
            "train": params.train.model_copy(update={"advantage": params.train.advantage.model_copy(update={"estimator": "seed_grpo"})}),
        }
    )
    result = train(params, [colour], tiny_model_dir, tmp_path / "ckpt", show_progress=False)
    final = result.final
    # the random tiny model names no colour: every sample is invalid (-1) and each is its own cluster
    assert final["reward/frequency_aware_mean"] == -1.0
    assert final["semantic_entropy_mean"] == pytest.approx(1.0)  # G clusters of one: log G / log G
    assert (tmp_path / "ckpt" / ADAPTER_DIR / "adapter_model.safetensors").is_file()


def test_gradient_checkpointing_trains_the_same_adapter(tiny_model_dir, tmp_path, monkeypatch):
    """Recomputing activations in the backward changes memory, not the update: two steps with and
    without `train.gradient_checkpointing` end with the same adapter (to float rounding), and only
    the second goes through torch's checkpoint."""
    import transformers.modeling_utils as modeling_utils

    calls = []
    real = modeling_utils.checkpoint
    monkeypatch.setattr(modeling_utils, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    plain = tiny_params(share_prompts=False)
    checkpointed = tiny_params(share_prompts=False, gradient_checkpointing=True)
    a = train(plain, groups(), tiny_model_dir, tmp_path / "plain", show_progress=False)
    assert not calls
    b = train(checkpointed, groups(), tiny_model_dir, tmp_path / "gc", show_progress=False)
    assert calls, "gradient checkpointing was not used"
    wa = load_file(tmp_path / "plain" / ADAPTER_DIR / "adapter_model.safetensors")
    wb = load_file(tmp_path / "gc" / ADAPTER_DIR / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in wa.items() if "lora_B" in k)
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-6)
    assert [h["loss"] for h in b.history] == pytest.approx([h["loss"] for h in a.history], rel=1e-4, abs=1e-7)


def test_gradient_checkpointing_with_shared_prompts_is_refused():
    from components.config import TrainConfig

    with pytest.raises(ValueError, match="gradient_checkpointing needs share_prompts: false"):
        TrainConfig(gradient_checkpointing=True, share_prompts=True)
    assert TrainConfig(gradient_checkpointing=True, share_prompts=False).gradient_checkpointing


def test_generation_beyond_the_model_context_is_refused_before_training(tiny_model_dir, tmp_path):
    """max_new_tokens + the longest chat prompt must fit the model (8192 positions) and a vLLM
    rollout engine's max_model_len: refused in one line naming both numbers, nothing written."""
    import re

    from components.config import RolloutConfig, RolloutVllmConfig
    from components.contracts.errors import UserError

    with pytest.raises(UserError, match=r"train\.max_new_tokens \(100000000\) \+ the longest prompt \((\d+) tokens\) "
                                        r"exceed the model's context \(8192 tokens\)") as info:  # fmt: skip
        train(tiny_params(max_new_tokens=100_000_000), groups(2), tiny_model_dir, tmp_path / "a", show_progress=False)
    assert "\n" not in str(info.value) and not (tmp_path / "a").exists()
    longest = int(re.search(r"\((\d+) tokens\)", str(info.value)).group(1))
    assert 20 < longest < 100  # the chat template included
    params = tiny_params(max_new_tokens=300)
    vllm = RolloutConfig(engine="vllm", vllm=RolloutVllmConfig(max_model_len=256))
    params = params.model_copy(update={"train": params.train.model_copy(update={"rollout": vllm})})
    with pytest.raises(UserError, match=rf"train\.max_new_tokens \(300\) \+ the longest prompt \({longest} tokens\) "
                                        r"exceed train\.rollout\.vllm\.max_model_len \(256 tokens\)"):  # fmt: skip
        train(params, groups(2), tiny_model_dir, tmp_path / "b", show_progress=False)


def test_unknown_lora_targets_are_refused_before_training_naming_the_modules_there_are(tiny_model_dir, tmp_path):
    """The base model was provisioned before lora.target_modules changed: training checks them again
    (it died in peft with NoMatchingPeftModuleError), matching as peft does (a dotted suffix is a name)."""
    from components.contracts.errors import UserError
    from components.models.lora import attach_lora
    from components.models.provision import load_base_model

    params = tiny_params()
    params = params.model_copy(update={"lora": params.lora.model_copy(update={"target_modules": ["q_proj", "no_such_module"]})})
    with pytest.raises(UserError, match=r"lora\.target_modules \['no_such_module'\] are not modules of this model; "
                                        r"the modules LoRA can wrap: \[.*'q_proj'.*\]") as info:  # fmt: skip
        train(params, groups(2), tiny_model_dir, tmp_path / "a", show_progress=False)
    assert "\n" not in str(info.value) and not (tmp_path / "a").exists()
    model, _ = load_base_model(tiny_model_dir)
    lora = params.lora.model_copy(update={"target_modules": ["self_attn.q_proj", "v_proj"]})
    assert attach_lora(model, lora).peft_config["default"].target_modules == {"self_attn.q_proj", "v_proj"}
