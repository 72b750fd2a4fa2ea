"""The GRPO training loop, top to bottom (one step = one batch of whole groups):

    rollouts   K samples per prompt variant of each group, from the current policy
    rewards    per-sample and whole-group reward functions, weighted (components.rewards)
    advantages group-relative over all variants of a group (components.grpo.advantages)
    loss       clipped surrogate + beta * k3 KL to the LoRA-disabled reference (components.grpo.losses)
    update     gradients accumulated group by group, clipped, AdamW step

With one policy update per batch of rollouts (mu = 1) the old log-probs equal the current ones
(ratio = 1), as in TRL's default; the clip still bounds the ratio when mu > 1 arrives.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from components.config import Params
from components.data.schema import PromptGroup
from components.generation.sampling import SamplingConfig, TransformersEngine
from components.grpo.advantages import get_adv_est
from components.grpo.checkpoint import save_checkpoint
from components.grpo.logprobs import completion_logprobs, pack
from components.grpo.losses import clipped_token_loss, get_loss_type
from components.grpo.semantic import answer_clusters, normalized_semantic_entropy
from components.grpo.types import GroupBatch, Rollout
from components.models.lora import attach_lora
from components.models.provision import load_base_model, read_provenance
from components.rewards import compute_rewards

StepCallback = Callable[[int, dict[str, float]], None]


class TrainingError(FloatingPointError):
    """The loss or the gradients became NaN/inf; nothing was saved."""


@dataclass
class TrainResult:
    checkpoint_dir: Path
    steps: int
    samples: int
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def final(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def group_schedule(groups: list[PromptGroup], per_step: int, steps: int, seed: int) -> list[list[PromptGroup]]:
    """Seeded epochs over the groups, `per_step` whole groups per step."""
    if not groups:
        raise ValueError("no training groups: check params.train.tasks and the train split")
    rng = random.Random(seed)
    order: list[PromptGroup] = []
    while len(order) < per_step * steps:
        epoch = list(groups)
        rng.shuffle(epoch)
        order.extend(epoch)
    return [order[i * per_step : (i + 1) * per_step] for i in range(steps)]


def collect_rollouts(engine: TransformersEngine, groups: list[PromptGroup], sampling: SamplingConfig) -> GroupBatch:
    prompts, owners = [], []
    for g, group in enumerate(groups):
        for member in group.members:
            prompts.append(member.text)
            owners.append((g, group, member))
    completions = engine.generate(prompts, sampling, desc="rollouts")
    rollouts = [
        Rollout(
            group_index=g,
            group_id=group.group_id,
            variant_id=member.variant_id,
            prompt=member.text,
            completion=c.text,
            prompt_ids=c.prompt_ids,
            completion_ids=c.completion_ids,
            truncated=c.truncated,
        )
        for (g, group, member), per_prompt in zip(owners, completions)
        for c in per_prompt
    ]
    return GroupBatch(groups=groups, rollouts=rollouts)


def group_uncertainty(batch: GroupBatch) -> torch.Tensor:
    """Per-sample normalised semantic entropy of the sample's group (components.grpo.semantic)."""
    out = torch.zeros(len(batch.rollouts), dtype=torch.float64)
    for g, group in enumerate(batch.groups):
        positions = batch.rollouts_of(g)
        clusters = answer_clusters([batch.rollouts[i] for i in positions], group)
        out[positions] = normalized_semantic_entropy(clusters)
    return out


def grpo_step(model, batch: GroupBatch, params: Params, pad_id: int) -> dict[str, float]:
    """Rewards -> advantages -> accumulated loss gradients for one batch; returns step metrics."""
    cfg = params.train
    rewards, per_fn = compute_rewards(batch, params.reward)
    uncertainty = group_uncertainty(batch)
    advantages = get_adv_est(cfg.advantage.estimator)(rewards, batch.index, cfg.advantage, uncertainty)
    lengths = torch.tensor([len(r.completion_ids) for r in batch.rollouts], dtype=torch.float64)
    weights = get_loss_type(cfg.loss_type)(lengths, cfg.max_new_tokens)

    total_loss, kl_sum, tokens, clip_low, clip_high = 0.0, 0.0, 0, 0, 0
    for g in range(len(batch.groups)):  # one micro-batch per whole group
        positions = [i for i in batch.rollouts_of(g) if batch.rollouts[i].completion_ids]
        if not positions:
            continue
        mb = [batch.rollouts[i] for i in positions]
        packed = pack(mb, pad_id)
        mask = packed.completion_mask
        logp = completion_logprobs(model, packed, cfg.temperature)
        old_logp = logp.detach()
        ref_logp = None
        if cfg.beta > 0:
            with torch.no_grad(), model.disable_adapter():
                ref_logp = completion_logprobs(model, packed, cfg.temperature)
        terms = clipped_token_loss(
            logp, old_logp, ref_logp, advantages[positions], cfg.epsilon_low, cfg.epsilon_high, cfg.beta
        )
        w = weights[positions].to(logp.dtype).unsqueeze(1)
        loss = (terms.loss * mask * w).sum()
        if not torch.isfinite(loss):
            raise TrainingError(f"non-finite loss {loss.item()} in group {batch.groups[g].group_id}")
        loss.backward()
        total_loss += loss.item()
        kl_sum += (terms.kl * mask).sum().item()
        tokens += int(mask.sum())
        clip_low += int((terms.clipped_low & mask).sum())
        clip_high += int((terms.clipped_high & mask).sum())

    metrics = {
        "loss": total_loss,
        "reward_mean": rewards.mean().item(),
        "reward_std": rewards.std().item() if rewards.numel() > 1 else 0.0,
        "semantic_entropy_mean": uncertainty.mean().item(),
        "advantage_mean": advantages.mean().item(),
        "advantage_std": advantages.std().item() if advantages.numel() > 1 else 0.0,
        "kl": kl_sum / max(tokens, 1),
        "clip_ratio_low": clip_low / max(tokens, 1),
        "clip_ratio_high": clip_high / max(tokens, 1),
        "completion_length_mean": lengths.mean().item(),
        "completion_length_max": lengths.max().item(),
        "truncated_share": float(np.mean([r.truncated for r in batch.rollouts])),
        "tokens": float(tokens),
    }
    for name, values in per_fn.items():
        metrics[f"reward/{name}_mean"] = values.mean().item()
        metrics[f"reward/{name}_std"] = values.std().item() if values.numel() > 1 else 0.0
    return metrics


def train(
    params: Params,
    groups: list[PromptGroup],
    base_model_dir: Path,
    checkpoint_dir: Path,
    on_step: StepCallback | None = None,
    show_progress: bool = True,
) -> TrainResult:
    """Fine-tune a LoRA adapter with group-relative GRPO and save it atomically to `checkpoint_dir`."""
    cfg = params.train
    seed_everything(params.seed)
    base, tokenizer = load_base_model(base_model_dir, params.model.dtype)
    model = attach_lora(base, params.lora)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay)
    engine = TransformersEngine(model, tokenizer, batch_size=cfg.generation_batch_size, show_progress=False)
    schedule = group_schedule(groups, cfg.groups_per_step, cfg.steps, params.seed)

    history: list[dict[str, float]] = []
    samples = 0
    started = time.perf_counter()
    bar = tqdm(schedule, desc="GRPO", unit="step", disable=not show_progress)
    for step, step_groups in enumerate(bar, start=1):
        t0 = time.perf_counter()
        sampling = SamplingConfig(
            n=cfg.samples_per_prompt,
            max_new_tokens=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seed=params.seed * 100_003 + step,
        )
        batch = collect_rollouts(engine, step_groups, sampling)
        model.train()
        optimizer.zero_grad(set_to_none=True)
        metrics = grpo_step(model, batch, params, tokenizer.pad_token_id)
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
        if not math.isfinite(float(grad_norm)):
            raise TrainingError(f"step {step}: non-finite gradient norm; no checkpoint written")
        optimizer.step()
        elapsed = time.perf_counter() - t0
        samples += len(batch.rollouts)
        metrics.update(
            step=float(step),
            grad_norm=float(grad_norm),
            step_time_s=elapsed,
            samples_per_s=len(batch.rollouts) / elapsed,
            tokens_per_s=metrics["tokens"] / elapsed,
        )
        history.append(metrics)
        bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", kl=f"{metrics['kl']:.4f}")
        if on_step is not None:
            on_step(step, metrics)

    seconds = time.perf_counter() - started
    provenance = read_provenance(base_model_dir)
    state = {
        "steps": cfg.steps,
        "samples": samples,
        "seconds": seconds,
        "seed": params.seed,
        "base_model_dir": str(Path(base_model_dir).resolve()),
        "base_model_sha256": provenance.weights_sha256 if provenance else None,
        "base_model_source": provenance.source if provenance else None,
        "final_metrics": history[-1],
    }
    save_checkpoint(checkpoint_dir, model, state, history)
    return TrainResult(Path(checkpoint_dir), cfg.steps, samples, seconds, history)
