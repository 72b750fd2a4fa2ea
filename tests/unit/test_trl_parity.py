"""groupwise's GRPO objective against TRL's GRPOTrainer (the anchor), on identical inputs.

TRL is a test-only dependency (pinned in the `test` extra). The loss side calls TRL's own
`GRPOTrainer._compute_loss` with its log-prob forward replaced by the given tensor, so the same
(log-probs, old log-probs, reference log-probs, advantages, masks) go through both implementations;
losses and gradients must agree within 1e-5. The advantage side runs TRL's real
`_generate_and_score_completions` on the tiny model with a reward function whose values we choose.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

trl = pytest.importorskip("trl")
from accelerate import Accelerator  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from components.config import AdvantageConfig  # noqa: E402
from components.grpo.advantages import grpo_advantage  # noqa: E402
from components.grpo.losses import clipped_token_loss, get_loss_type  # noqa: E402

MAX_LEN = 7
EPS_LOW, EPS_HIGH, BETA = 0.2, 0.28, 0.04


def trl_loss_trainer(tmp_path, loss_type: str, accumulation: int, steps_per_generation: int = 1, correction=False):
    """A GRPOTrainer with just the state `_compute_loss` reads (set the way its __init__ sets it)."""
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        loss_type=loss_type,
        beta=BETA,
        epsilon=EPS_LOW,
        epsilon_high=EPS_HIGH,
        max_completion_length=MAX_LEN,
        steps_per_generation=steps_per_generation,
        gradient_accumulation_steps=accumulation,
        per_device_train_batch_size=2,
        num_generations=2,
        report_to=[],
        use_bias_correction_kl=correction,
    )
    trainer = GRPOTrainer.__new__(GRPOTrainer)
    trainer.args = args
    trainer.accelerator = Accelerator(cpu=True)
    trainer.model = torch.nn.Linear(1, 1)  # only `.training` is read
    trainer.model.train()
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer.loss_type, trainer.beta = loss_type, BETA
    trainer.epsilon_low, trainer.epsilon_high = args.epsilon, args.epsilon_high
    trainer.max_completion_length = MAX_LEN
    trainer.top_entropy_quantile = args.top_entropy_quantile
    trainer.off_policy_mask_threshold = args.off_policy_mask_threshold
    trainer.importance_sampling_level = args.importance_sampling_level
    trainer.use_vllm = False
    trainer.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    trainer._entropy_bonus_enabled = False
    trainer.aux_loss_enabled = False
    trainer.current_gradient_accumulation_steps = accumulation
    return trainer


def random_inputs(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, MAX_LEN + 1, (n,), generator=g)
    mask = (torch.arange(MAX_LEN).unsqueeze(0) < lengths.unsqueeze(1)).long()
    logp = -torch.rand(n, MAX_LEN, generator=g, dtype=torch.float64) * 3
    old = logp - 0.3 * torch.randn(n, MAX_LEN, generator=g, dtype=torch.float64)  # ratios on both sides of the clip
    ref = logp - 0.5 * torch.randn(n, MAX_LEN, generator=g, dtype=torch.float64)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    return lengths, mask, logp, old, ref, adv


def trl_micro_batch_loss(trainer, logp, old, ref, adv, mask, num_items):
    logp = logp.clone().requires_grad_(True)
    entropies = torch.zeros_like(logp)
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropies, None)
    n = logp.shape[0]
    inputs = {
        "prompt_ids": torch.ones(n, 2, dtype=torch.long),
        "prompt_mask": torch.ones(n, 2, dtype=torch.long),
        "completion_ids": torch.ones(n, MAX_LEN, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(float(num_items)),
    }
    loss = trainer._compute_loss(None, inputs)
    loss.backward()
    return loss.detach(), logp.grad


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("correction", [False, True], ids=["k3", "k3-ratio"])
def test_loss_and_gradients_match_trl(tmp_path, loss_type, accumulation, correction):
    n = 8
    lengths, mask, logp, old, ref, adv = random_inputs(n, seed=7 + accumulation)
    micro = torch.arange(n) // (n // accumulation)  # equal-size micro-batches, as TRL's accumulation
    trainer = trl_loss_trainer(tmp_path, loss_type, accumulation, accumulation, correction)

    trl_total, trl_grad = torch.tensor(0.0, dtype=torch.float64), torch.zeros_like(logp)
    for j in range(accumulation):
        rows = micro == j
        loss, grad = trl_micro_batch_loss(trainer, logp[rows], old[rows], ref[rows], adv[rows], mask[rows], num_items=int(mask.sum()))
        trl_total += loss
        trl_grad[rows] = grad

    weights = get_loss_type(loss_type)(lengths, micro, MAX_LEN)
    ours_logp = logp.clone().requires_grad_(True)
    terms = clipped_token_loss(ours_logp, old, ref, adv, EPS_LOW, EPS_HIGH, BETA, kl_ratio_correction=correction)
    ours = (terms.loss * mask * weights.unsqueeze(1)).sum()
    ours.backward()

    assert ours.item() == pytest.approx(trl_total.item(), abs=1e-5)
    assert torch.allclose(ours_logp.grad, trl_grad, atol=1e-5), (ours_logp.grad - trl_grad).abs().max()
    assert trl_grad.abs().sum() > 0  # the comparison is not vacuous


def test_clip_ratio_metrics_match_trl(tmp_path):
    lengths, mask, logp, old, ref, adv = random_inputs(8, seed=3)
    trainer = trl_loss_trainer(tmp_path, "grpo", 1)
    trl_micro_batch_loss(trainer, logp, old, ref, adv, mask, int(mask.sum()))
    terms = clipped_token_loss(logp, old, ref, adv, EPS_LOW, EPS_HIGH, BETA)
    m = mask.bool()
    low = (terms.clipped_low & m).sum().item() / m.sum().item()
    high = (terms.clipped_high & m).sum().item() / m.sum().item()
    assert trainer._metrics["train"]["clip_ratio/low_mean"][0] == pytest.approx(low)
    assert trainer._metrics["train"]["clip_ratio/high_mean"][0] == pytest.approx(high)
    assert low + high > 0
    kl = (terms.kl * m).sum().item() / m.sum().item()
    assert trainer._metrics["train"]["kl"][0] == pytest.approx(kl, rel=1e-6)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_advantages_match_trl_on_single_prompt_groups(tiny_model_dir, tmp_path, scale):
    """TRL's real generate-and-score path on the tiny model, rewards chosen by us."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    k, prompts = 4, ["Name a colour.", "Name a fruit.", "Name a planet."]
    chosen = [0.1, 0.7, 0.7, -1.0, 1.0, 1.0, 1.0, 1.0, 0.25, -0.5, 0.0, 3.0]  # group 2 has zero std

    def reward(prompts, completions, **_):
        return chosen[: len(completions)]

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        num_generations=k,
        per_device_train_batch_size=len(chosen),
        max_completion_length=4,
        scale_rewards=scale,
        report_to=[],
        seed=0,
    )
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in prompts])
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tokenizer)
    inputs = [{"prompt": [{"role": "user", "content": p}]} for p in prompts for _ in range(k)]
    trl_adv = trainer._generate_and_score_completions(inputs)["advantages"]

    index = torch.arange(len(chosen)) // k
    ours = grpo_advantage(torch.tensor(chosen), index, AdvantageConfig(scale=scale, eps=1e-4))
    assert torch.allclose(ours.double(), trl_adv.double(), atol=1e-5), (ours, trl_adv)
