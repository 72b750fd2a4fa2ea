"""The GRPO training loop (one step = one batch of whole groups):

    rollouts    K samples per prompt variant of each group, from the current policy (rollouts.py)
    rewards     per-sample and whole-group reward functions, weighted (components.rewards)
    advantages  group-relative over all variants of a group, optionally SEED-scaled (advantages.py)
    update      mu optimizer steps over whole-group micro-batches, clipped surrogate + beta k3 KL
                to the LoRA-disabled reference (update.py, losses.py)
    state       every `save_every` steps an atomic resumable state (checkpoint.py); `resume=True`
                continues from the newest one and ends with the same weights as an unbroken run
    determinism PyTorch's ordered kernels throughout (determinism.py): two runs of one configuration
                on one machine end with the same weights, bit for bit

Distributed data parallel when launched by torchrun (distributed.py): each rank samples, rewards
and scores its own whole groups; loss weights and logged statistics are global.
"""

from __future__ import annotations

import random
import shutil
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from components.config import Params, ParamsError
from components.contracts.checkpoint import CheckpointLayout, resume_state_name
from components.contracts.errors import Preempted, UserError
from components.contracts.groups import PromptGroup
from components.contracts.rollouts import GroupBatch
from components.formatting import percent
from components.generation.context import check_fits, context_length, longest_prompt_tokens
from components.generation.sampling import SamplingConfig
from components.grpo.advantages import advantage_stages, get_adv_est, uses_uncertainty
from components.grpo.checkpoint import latest_train_state, load_train_state, rng_state, save_checkpoint, save_train_state
from components.grpo.counterfactual import check_pairing_rewards, clp_update, pairing_term_loss
from components.grpo.decisions import decision_spreads
from components.grpo.determinism import deterministic_algorithms
from components.grpo.distributed import DistContext, init_from_env
from components.grpo.preemption import StopRequests
from components.grpo.reference import Reference
from components.grpo.rollout_engines import open_rollout_engine
from components.grpo.rollouts import collect_rollouts, group_uncertainty, rollout_table
from components.grpo.semantic import check_answer_clustering
from components.grpo.update import TrainingError, policy_update
from components.models.cpu_matmul import apply_cpu_matmul
from components.models.lora import attach_lora, initialise_adapter
from components.models.provision import load_base_model, read_provenance
from components.rewards import compute_rewards
from components.rewards.registry import REWARDS, is_decision, is_free_text

StepCallback = Callable[[int, dict[str, float]], None]
RolloutCallback = Callable[[int, list[dict]], None]

__all__ = ["TrainResult", "TrainingError", "ResumeError", "NoResumeStateError", "train", "group_schedule", "seed_everything"]


class ResumeError(UserError, ValueError):
    """`--resume` cannot continue: the saved state was made for another model, params or groups."""


class NoResumeStateError(ResumeError, FileNotFoundError):
    """`--resume` found no saved training state."""


# a step's phases (metrics of every step; components.grpo.update.PhaseClock times the update's)
TIME_PHASES = {"rollouts": "generation_time_s", "reward": "time/reward_s", "reference": "time/reference_s",
               "forward/backward": "time/forward_backward_s", "optimizer": "time/optimizer_s"}  # fmt: skip


@dataclass
class TrainResult:
    checkpoint_dir: Path
    steps: int
    samples: int
    seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    resumed_from: int = 0

    @property
    def final(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}

    def time_shares(self) -> dict[str, float]:
        """Where the steps' time went: each phase's share of the summed `step_time_s` (`TIME_PHASES`;
        "other" the rest). Empty without timed steps."""
        total = sum(h.get("step_time_s", 0.0) for h in self.history)
        if total <= 0:
            return {}
        shares = {name: sum(h.get(key, 0.0) for h in self.history) / total for name, key in TIME_PHASES.items()}
        shares = {name: share for name, share in shares.items() if share > 0}
        return shares | {"other": max(0.0, 1.0 - sum(shares.values()))}

    def time_line(self) -> str:
        """`time_shares` in one line: "time: rollouts 61 %, reward 4 %, ..." (empty without timed steps)."""
        shares = self.time_shares()
        return "time: " + ", ".join(f"{name} {percent(share)}" for name, share in shares.items()) if shares else ""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _epochs(groups: list[PromptGroup], count: int, rng: random.Random, shuffle: bool) -> list[PromptGroup]:
    """`count` groups from seeded epochs over `groups` (each epoch a fresh shuffle)."""
    order: list[PromptGroup] = []
    while len(order) < count:
        epoch = list(groups)
        if shuffle:
            rng.shuffle(epoch)
        order.extend(epoch)
    return order[:count]


def group_schedule(
    groups: list[PromptGroup],
    per_step: int,
    steps: int,
    seed: int,
    shuffle: bool = True,
    decision_per_step: int | None = None,
    ranks: int = 1,
) -> list[list[PromptGroup]]:
    """Seeded epochs over the groups, `per_step` whole groups per step (the data cursor is the step).

    With `decision_per_step` n, each step holds n decision groups and `per_step` − n free-text
    groups, each kind from its own epochs (`train.decision_groups_per_step`): a fixed mix, where one
    pool would follow the kinds' counts (1,000 decision groups beside 156 free-text ones). The step
    is laid out in `ranks` equal blocks (`DistContext.shard`), each with its share of both kinds."""
    if not groups:
        raise ParamsError("no training groups: check params.train.tasks and the train split")
    if decision_per_step is None:
        order = _epochs(groups, per_step * steps, random.Random(seed), shuffle)
        return [order[i * per_step : (i + 1) * per_step] for i in range(steps)]
    decided = [g for g in groups if g.decision is not None]
    free = [g for g in groups if g.decision is None]
    for kind, pool in (("decision groups (data.decision_groups)", decided), ("free-text groups", free)):
        if not pool:
            raise ParamsError(f"train.decision_groups_per_step {decision_per_step}: no {kind} among the {len(groups)} training groups")
    n_free = per_step - decision_per_step
    if n_free % ranks or decision_per_step % ranks:
        raise ParamsError(
            f"train.decision_groups_per_step {decision_per_step} of groups_per_step {per_step}: each kind must split evenly "
            f"over the {ranks} processes (every process gets its share of both)"
        )
    free_order = _epochs(free, n_free * steps, random.Random(seed), shuffle)
    decided_order = _epochs(decided, decision_per_step * steps, random.Random(f"{seed}:decisions"), shuffle)
    free_each, decided_each = n_free // ranks, decision_per_step // ranks
    schedule = []
    for i in range(steps):
        step: list[PromptGroup] = []
        for r in range(ranks):  # rank r's block: its free-text groups, then its decision groups
            step += free_order[i * n_free + r * free_each : i * n_free + (r + 1) * free_each]
            step += decided_order[i * decision_per_step + r * decided_each : i * decision_per_step + (r + 1) * decided_each]
        schedule.append(step)
    return schedule


TRAINING_SECTIONS = ("seed", "model", "lora", "train", "reward")


def run_fingerprint(params: Params, groups: list[PromptGroup], world_size: int) -> str:
    """What a resumable state must match (`Params.fingerprint`): the training sections of the
    params, the groups, the world size."""
    return params.fingerprint(TRAINING_SECTIONS, groups=[g.group_id for g in groups], world_size=world_size)


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.double()
    return {
        f"{prefix}_mean": values.mean().item(),
        f"{prefix}_std": values.std().item() if values.numel() > 1 else 0.0,
        f"{prefix}_min": values.min().item(),
        f"{prefix}_max": values.max().item(),
    }


def batch_reward_std(rewards: torch.Tensor, ctx: DistContext) -> float:
    """Std of the rewards of every rank's batch (`advantage.scale: batch` under DDP): one all-reduce
    of (sum, sum of squares, count), unbiased like torch.std."""
    s = ctx.all_reduce_sum(torch.tensor([rewards.double().sum(), (rewards.double() ** 2).sum(), rewards.numel()]))
    mean = s[0] / s[2]
    return float(torch.sqrt((s[1] - s[2] * mean**2) / (s[2] - 1).clamp(min=1)))


def score_batch(batch: GroupBatch, params: Params, ctx: DistContext) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """Rewards -> advantages for this rank's groups; returns advantages, global metrics and rewards."""
    cfg = params.train
    rewards, per_fn = compute_rewards(batch, params.reward)
    needs_uncertainty = uses_uncertainty(cfg.advantage.estimator) or cfg.advantage.clustering == "answer"
    uncertainty = group_uncertainty(batch, cfg.advantage) if needs_uncertainty else None
    global_std = batch_reward_std(rewards, ctx) if "batch" in (cfg.advantage.scale, cfg.advantage.decision_scale) and ctx.enabled else None
    advantages = get_adv_est(cfg.advantage.estimator)(rewards, batch.index, cfg.advantage, uncertainty, global_std=global_std)
    decided = torch.tensor([batch.groups[r.group_index].decision is not None for r in batch.rollouts], dtype=torch.bool)
    if cfg.advantage.decision_scale not in (None, cfg.advantage.scale) and bool(decided.any()):
        own = cfg.advantage.model_copy(update={"scale": cfg.advantage.decision_scale})  # decision groups: their own scale
        advantages = torch.where(
            decided, get_adv_est(cfg.advantage.estimator)(rewards, batch.index, own, uncertainty, global_std=global_std), advantages
        )
    stages = advantage_stages(rewards, batch.index, cfg.advantage, advantages, global_std=global_std)

    lengths = torch.tensor([len(r.completion_ids) for r in batch.rollouts], dtype=torch.float64)
    truncated = torch.tensor([float(r.truncated) for r in batch.rollouts], dtype=torch.float64)
    group_std = [rewards[batch.rollouts_of(g)].double().std().item() for g in range(len(batch.groups))]
    local = {
        "rewards": rewards,
        "per_fn": per_fn,
        "stages": stages,
        "lengths": lengths,
        "truncated": truncated,
        "zero_std_groups": sum(s < 1e-8 for s in group_std),
        "groups": len(batch.groups),
        "uncertainty": uncertainty,
        "decisions": decision_spreads(batch.rollouts, len(batch.groups)),
    }
    parts = ctx.all_gather_object(local)
    cat = lambda key: torch.cat([p[key].double() for p in parts])  # noqa: E731
    metrics = {**_stats("reward", cat("rewards"))}
    for name in per_fn:
        values = torch.cat([p["per_fn"][name].double() for p in parts])
        metrics[f"reward/{name}_mean"] = values.mean().item()
        metrics[f"reward/{name}_std"] = values.std().item() if values.numel() > 1 else 0.0
    for stage in stages:
        metrics.update(_stats(f"advantage/{stage}", torch.cat([p["stages"][stage].double() for p in parts])))
    metrics["advantage_mean"] = metrics["advantage/final_mean"]
    metrics["advantage_std"] = metrics["advantage/final_std"]
    metrics["frac_groups_zero_reward_std"] = sum(p["zero_std_groups"] for p in parts) / sum(p["groups"] for p in parts)
    if uncertainty is not None:
        metrics["semantic_entropy_mean"] = torch.cat([p["uncertainty"] for p in parts]).mean().item()
    decisions = [d for p in parts for d in p["decisions"]]
    if decisions:  # decision groups: the spread of the variants' log-odds and their level
        metrics["decision/spread_mean"] = sum(s for s, _ in decisions) / len(decisions)
        metrics["decision/logodds_mean"] = sum(m for _, m in decisions) / len(decisions)
    lengths_all = cat("lengths")
    metrics["completion_length_mean"] = lengths_all.mean().item()
    metrics["completion_length_max"] = lengths_all.max().item()
    metrics["truncated_share"] = cat("truncated").mean().item()
    metrics["samples"] = float(lengths_all.numel())
    return advantages, metrics, rewards


def _lr_scheduler(optimizer, params: Params):
    from transformers import get_scheduler

    cfg = params.train
    total = cfg.steps * cfg.num_iterations
    return get_scheduler(cfg.lr_scheduler, optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=total)


def check_generation_fits(params: Params, groups: list[PromptGroup], model_config, tokenizer) -> None:
    """The longest training prompt plus train.max_new_tokens must fit the model's context and, with
    vLLM rollouts, the engine's max_model_len: refused before training, not hung or cut inside it."""
    cfg = params.train
    longest = longest_prompt_tokens(tokenizer, (m.text for g in groups for m in g.members))
    check_fits(longest, cfg.max_new_tokens, "train.max_new_tokens", context_length(model_config), "the model's context")
    if cfg.rollout.engine == "vllm":
        limit = cfg.rollout.vllm.max_model_len
        check_fits(longest, cfg.max_new_tokens, "train.max_new_tokens", limit, "train.rollout.vllm.max_model_len")


def snapshot_dir(checkpoint_dir: Path, step: int) -> Path:
    """Where `train.snapshot_every` keeps the adapter of `step`: <checkpoint_dir>/../snapshots/step-NNNNN."""
    return CheckpointLayout.beside(checkpoint_dir).snapshot(step)


def _final_state(params: Params, base_model_dir: Path, steps: int, samples: int, seconds: float, start_step: int,
                 fingerprint: str, history: list[dict[str, float]], world_size: int = 1) -> dict:  # fmt: skip
    """train_state.json of a checkpoint: progress, provenance of the base model, the last metrics."""
    provenance = read_provenance(base_model_dir)
    return {
        "steps": steps,
        "samples": samples,
        "seconds": seconds,
        "seed": params.seed,
        "world_size": world_size,
        "resumed_from_step": start_step - 1,
        "fingerprint": fingerprint,
        "base_model_dir": str(Path(base_model_dir).resolve()),
        "base_model_sha256": provenance.weights_sha256 if provenance else None,
        "base_model_source": provenance.source if provenance else None,
        "final_metrics": history[-1] if history else {},
    }


def _stop_agreed(stops: StopRequests, ctx: DistContext) -> bool:
    """Whether any process got a stop signal (every rank stops after the same step)."""
    if not ctx.enabled:
        return stops.held()
    return bool(ctx.all_reduce_sum(torch.tensor([float(stops.held())], device=ctx.device)).item() > 0)


@deterministic_algorithms()  # the same params and machine: the same weights (determinism.py)
def train(
    params: Params,
    groups: list[PromptGroup],
    base_model_dir: Path,
    checkpoint_dir: Path,
    on_step: StepCallback | None = None,
    show_progress: bool = True,
    resume: bool = False,
    state_dir: Path | None = None,
    on_rollouts: RolloutCallback | None = None,
    shuffle: bool = True,
    ctx: DistContext | None = None,
) -> TrainResult:
    """Fine-tune a LoRA adapter with group-relative GRPO and save it atomically to `checkpoint_dir`.

    `state_dir` (default: `<checkpoint_dir>/../resume`) holds the newest resumable state;
    `resume=True` continues from it (and refuses a state written for another configuration).
    The caller has loaded `reward.plugins` and checked the names params give
    (`components.plugins.check_registered_names`, as `flows.steps.train` does on every rank).
    """
    check_answer_clustering(groups, params.train.advantage)
    check_pairing_rewards(params.reward.weights, {name: fn.applies is is_decision for name, fn in REWARDS.items()},
                          params.train.decision_pairing.weight)  # fmt: skip
    cfg = params.train
    ctx = ctx or init_from_env(cfg.device)
    checkpoint_dir = Path(checkpoint_dir)
    state_dir = Path(state_dir) if state_dir is not None else CheckpointLayout.beside(checkpoint_dir).resume
    seed_everything(params.seed)
    base, tokenizer = load_base_model(base_model_dir, params.model.dtype)
    check_generation_fits(params, groups, base.config, tokenizer)
    if cfg.gradient_checkpointing:  # non-reentrant: no input-grad hook needed for the frozen embeddings
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = attach_lora(base, params.lora)
    start = None
    if cfg.init_adapter is not None:  # e.g. a study arm that starts from another arm's adapter
        start = initialise_adapter(model, cfg.init_adapter if cfg.init_adapter.is_absolute() else params.root / cfg.init_adapter)
    reference = Reference.of(cfg.reference, start)  # π_ref of the KL term
    anchored = params.reward.decision_target == "reference_mean"  # decision rewards read ℓ under π_ref
    model = model.to(ctx.device)  # train.device: every weight, and so every activation
    apply_cpu_matmul(model, cfg.cpu_matmul, cfg.precision, ctx.device)  # oneDNN for the frozen fp32 linears where asked
    model.train()
    trainer_model = model
    if ctx.enabled and cfg.objective != "grpo":
        raise TrainingError(f"train.objective {cfg.objective}: runs on one process (no DDP); train without torchrun")
    if ctx.enabled:
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None  # nccl: this rank's GPU
        trainer_model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = _lr_scheduler(optimizer, params)
    schedule = group_schedule(groups, cfg.groups_per_step, cfg.steps, params.seed, shuffle=shuffle,
                              decision_per_step=cfg.decision_groups_per_step, ranks=ctx.world_size)  # fmt: skip
    fingerprint = run_fingerprint(params, groups, ctx.world_size)

    history: list[dict[str, float]] = []
    samples, elapsed_before, start_step = 0, 0.0, 1
    if resume:
        latest = latest_train_state(state_dir)
        if latest is None:
            raise NoResumeStateError(f"{state_dir}: no resumable training state to resume from")
        try:
            progress = load_train_state(latest, model, optimizer, scheduler)
        except ValueError as exc:  # weights or optimizer of another model or LoRA shape
            raise ResumeError(f"{latest}: does not fit this model and configuration ({exc}); train without --resume") from exc
        if progress.get("fingerprint") != fingerprint:
            raise ResumeError(
                f"{latest}: written for another configuration (fingerprint {progress.get('fingerprint')} != "
                f"{fingerprint}); train without --resume, or restore the params and groups it was made with"
            )
        history = progress["history"]
        samples, elapsed_before, start_step = progress["samples"], progress["seconds"], progress["step"] + 1

    started = time.perf_counter()
    stops = StopRequests()  # SIGTERM/SIGINT: a resumable state, then Preempted (preemption.py)

    def save_state(step: int, rng: dict | None = None) -> Path:
        progress = {"fingerprint": fingerprint, "samples": samples, "seconds": elapsed_before + time.perf_counter() - started,
                    "history": history}  # fmt: skip
        return save_train_state(state_dir, step, model, optimizer, scheduler, progress, rng=rng)

    def stop(step: int, rng: dict | None = None) -> Preempted:
        """Save the state after `step` (rank 0) and say how to continue."""
        saved = latest_train_state(state_dir)
        if ctx.is_main and (saved is None or saved.name != resume_state_name(step)):
            saved = save_state(step, rng)
        ctx.barrier()
        return Preempted(
            f"stopped by {stops.name} after step {step} of {cfg.steps}; resumable state {saved}; continue with --resume",
            stops.requested or signal.SIGTERM,
        )

    with stops:
        engine = open_rollout_engine(params, model, tokenizer, base_model_dir)
        try:
            bar = tqdm(
                range(start_step, cfg.steps + 1),
                desc="GRPO",
                unit="step",
                disable=not (show_progress and ctx.is_main),
                initial=start_step - 1,
                total=cfg.steps,
            )
            for step in bar:
                if _stop_agreed(stops, ctx):
                    raise stop(step - 1)
                t0 = time.perf_counter()
                step_rng = rng_state()  # what a state saved before this step's update restores
                sampling = SamplingConfig(
                    n=cfg.samples_per_prompt,
                    max_new_tokens=cfg.max_new_tokens,
                    temperature=cfg.temperature,
                    top_p=cfg.top_p,
                    seed=params.seed * 100_003 + step * 101 + ctx.rank,
                )
                batch, t_gen, synced, extra_loss = None, 0.0, {}, None
                if cfg.objective != "counterfactual_logit_pairing":
                    # nothing here changes the weights: one process stops here at once, keeping the step's start
                    with stops.abortable() if not ctx.enabled else nullcontext():
                        shard = ctx.shard(schedule[step - 1])
                        if cfg.decision_pairing.weight > 0:  # the decision groups train by their log-odds, unsampled
                            decided = [g for g in shard if is_decision(g)]
                            shard = [g for g in shard if is_free_text(g)]
                            extra_loss = pairing_term_loss(trainer_model, model, tokenizer, decided, cfg, reference, ctx.world_size)
                        synced = engine.sync(model, step)
                        batch = collect_rollouts(engine, shard, sampling, (model, tokenizer), cfg.generation_batch_size,
                                                 reference if anchored else None)  # fmt: skip
                        engine.release()
                        t_gen = time.perf_counter() - t0
                        model.train()
                        scored = time.perf_counter()
                        advantages, metrics, rewards = score_batch(batch, params, ctx)
                        metrics["time/reward_s"] = time.perf_counter() - scored  # rewards, SEED's clustering, advantages
                    if stops.held() and not ctx.enabled:
                        raise stop(step - 1, step_rng)
                if cfg.objective == "counterfactual_logit_pairing":  # no rollouts: a loss on the decisions themselves
                    update = clp_update(model, optimizer, scheduler, ctx.shard(schedule[step - 1]), tokenizer, cfg, reference)
                    metrics = {k: update.pop(k) for k in ("reward_mean", "samples", "decision/spread_mean", "decision/logodds_mean")}
                else:
                    update = policy_update(model, trainer_model, optimizer, scheduler, batch, advantages, cfg, tokenizer.pad_token_id,
                                           ctx, reference, extra_loss)  # fmt: skip
                elapsed = time.perf_counter() - t0
                samples += int(metrics["samples"])
                metrics.update(update)
                metrics.update(
                    step=float(step),
                    step_time_s=elapsed,
                    generation_time_s=t_gen,
                    samples_per_s=metrics["samples"] / elapsed,
                    tokens_per_s=metrics["tokens"] / elapsed,
                    **synced,
                )
                history.append(metrics)
                bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", kl=f"{metrics['kl']:.4f}")
                if ctx.is_main:
                    if on_step is not None:
                        on_step(step, metrics)
                    if on_rollouts is not None and batch is not None and cfg.log_rollouts_every and step % cfg.log_rollouts_every == 0:
                        on_rollouts(step, rollout_table(batch, rewards, advantages, step))
                    if cfg.snapshot_every and step % cfg.snapshot_every == 0 and step < cfg.steps:
                        # an evaluable adapter of this step (learning curves), beside the final checkpoint
                        seconds_so_far = elapsed_before + time.perf_counter() - started
                        state = _final_state(
                            params, base_model_dir, step, samples, seconds_so_far, start_step, fingerprint, history, ctx.world_size
                        )
                        save_checkpoint(snapshot_dir(checkpoint_dir, step), model, state, history)
                    if cfg.save_every and step % cfg.save_every == 0 and step < cfg.steps:
                        save_state(step)
                ctx.barrier()
        finally:
            engine.close()

    seconds = elapsed_before + time.perf_counter() - started
    if ctx.is_main:
        save_checkpoint(
            checkpoint_dir,
            model,
            _final_state(params, base_model_dir, cfg.steps, samples, seconds, start_step, fingerprint, history, ctx.world_size),
            history,
        )
        shutil.rmtree(state_dir, ignore_errors=True)  # the run is complete: nothing left to resume
    ctx.barrier()
    if stops.held():  # came while the engine closed: the run is complete, what follows it is not started
        raise Preempted(f"stopped by {stops.name} after the last step; the checkpoint {checkpoint_dir} is complete", stops.requested)
    return TrainResult(checkpoint_dir, cfg.steps, samples, seconds, history, resumed_from=start_step - 1)
