"""Policy update for one batch of rollouts: mu optimizer steps over whole-group micro-batches.

    for iteration in 1..mu (train.num_iterations):
        for each micro-batch of whole groups (gradient accumulation):
            logp  = log pi_theta(o_t | q, o_<t)                       (with grad)
            old   = logp.detach() if mu == 1 else log-probs stored before the first update
            w_is  = truncated importance weight old vs the rollout engine's log-probs (vLLM
                    rollouts only; components.grpo.importance_sampling), computed once per batch
            ref   = log pi_ref (adapter disabled), computed once per batch, only when beta > 0
            loss  = sum_i w_i sum_t l_it m_it          (l_it: the `train.policy_loss` surrogate,
                                                        components.grpo.policy_losses, + beta k3;
                                                        w_i: the loss type on the global batch, losses.py)
            backward (DDP all-reduces on the last micro-batch only)
        + the gradient of `extra_loss` (train.decision_pairing: a loss on the step's decision groups)
        clip the gradient norm, optimizer step, scheduler step

With DDP each rank holds whole groups; DDP averages gradients over ranks, so each rank's loss is
multiplied by the world size to recover the sum over the global batch.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from components.config import TrainConfig
from components.contracts.errors import UserError
from components.contracts.rollouts import GroupBatch
from components.grpo.distributed import DistContext
from components.grpo.forward_chunks import forward_chunks
from components.grpo.importance_sampling import importance_weights, pack_engine_logprobs
from components.grpo.losses import clipped_token_loss, get_loss_type
from components.grpo.reference import BASE, Reference
from components.models.logprobs import (
    PackedBatch,
    SharedPromptBatch,
    completion_logprobs,
    pack,
    pack_shared,
    shared_prompt_logprobs,
)


class TrainingError(UserError, FloatingPointError):
    """The loss or the gradients became NaN/inf; nothing was saved."""


@dataclass
class MicroBatch:
    positions: list[int]  # indices into batch.rollouts
    packed: PackedBatch | SharedPromptBatch
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    micro_id: int = 0  # the micro-batch (of whole groups) these rows belong to; loss weights use it
    engine_logp: torch.Tensor | None = None  # (B, C) log-probs of the engine that sampled the rows (vLLM)
    is_weight: torch.Tensor | None = None  # importance weights, fixed at the first iteration
    ref_is_policy: bool = False  # π_ref is the policy (a run's first step): ref_logp is the behaviour policy's

    def to(self, device: torch.device) -> MicroBatch:
        """The rows' tensors on the model's device (the packed batch and the engine's log-probs)."""
        self.packed = self.packed.to(device)
        if self.engine_logp is not None:
            self.engine_logp = self.engine_logp.to(device)
        return self


def precision_context(precision: str, device: torch.device):
    """bf16 autocast for the matmuls (CPU AMX or GPU); fp32 runs as is."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class FrozenWeightCasts:
    """The frozen linear weights in bf16, cast once per update and lent to every forward under autocast.

    Autocast keeps its casts only of leaves that require grad, so each forward re-cast every frozen
    base weight (134M values for SmolLM2-135M, about 0.15 s on the 2-core benchmark CPU; a step runs
    ~16 forwards). The copies are what autocast would have made (round to nearest), so every result
    is the same to the bit (tested); the originals are back in place after each forward. fp32: nothing.
    """

    def __init__(self, model, precision: str) -> None:
        self._linears = [] if precision != "bf16" else [
            m for m in model.modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad
        ]  # fmt: skip
        self._copies: dict[torch.nn.Module, torch.nn.Parameter] = {}

    @contextlib.contextmanager
    def lent(self):
        originals = [m.weight for m in self._linears]
        try:
            for m in self._linears:
                if m not in self._copies:
                    self._copies[m] = torch.nn.Parameter(m.weight.detach().to(torch.bfloat16), requires_grad=False)
                m.weight = self._copies[m]
            yield
        finally:
            for m, weight in zip(self._linears, originals):
                m.weight = weight


def plan_micro_batches(
    batch: GroupBatch,
    groups_per_micro_batch: int,
    pad_id: int,
    share_prompts: bool = True,
    rows_per_forward: int = 0,
    chunking: str = "consecutive",
) -> list[MicroBatch]:
    """Consecutive whole groups per micro-batch (empty completions carry no tokens and are skipped).

    A micro-batch's rows run as forward/backward chunks of at most `rows_per_forward` rows (> 0) that
    share its `micro_id`, cut as `chunking` says (components.grpo.forward_chunks): the loss is a sum
    of per-sequence terms with weights fixed on the whole batch, so chunking changes time and memory,
    not the gradient (tested equal).
    """
    packer = pack_shared if share_prompts else pack
    out = []
    for micro_id, start in enumerate(range(0, len(batch.groups), groups_per_micro_batch)):
        positions = [
            i
            for g in range(start, min(start + groups_per_micro_batch, len(batch.groups)))
            for i in batch.rollouts_of(g)
            if batch.rollouts[i].completion_ids
        ]
        for chunk in forward_chunks(batch.rollouts, positions, rows_per_forward, chunking, share_prompts) if positions else []:
            rollouts = [batch.rollouts[i] for i in chunk]
            mb = MicroBatch(chunk, packer(rollouts, pad_id), micro_id=micro_id)
            if any(r.behaviour_logprobs for r in rollouts):
                bad = [r.group_id for r in rollouts if len(r.behaviour_logprobs) != len(r.completion_ids)]
                if bad:
                    raise ValueError(f"rollouts of groups {sorted(set(bad))}: engine log-probs do not match their tokens")
                width = mb.packed.completion_mask.shape[1]
                mb.engine_logp = pack_engine_logprobs([r.behaviour_logprobs for r in rollouts], width)
            out.append(mb)
    return out


def global_token_weights(batch: GroupBatch, micro_batches: list[MicroBatch], cfg: TrainConfig, ctx: DistContext) -> torch.Tensor:
    """This rank's per-sequence weights w_i, computed from every rank's lengths and micro-batches."""
    n = len(batch.rollouts)
    lengths = torch.tensor([len(r.completion_ids) for r in batch.rollouts], dtype=torch.float64)
    local_micro = torch.full((n,), -1, dtype=torch.long)
    for mb in micro_batches:
        local_micro[mb.positions] = mb.micro_id
    count = len({mb.micro_id for mb in micro_batches})
    gathered = ctx.all_gather_object((lengths, local_micro, count))
    start = sum(len(lens) for lens, _, _ in gathered[: ctx.rank])  # this rank's rows in the global batch
    micro_offsets = [sum(count for _, _, count in gathered[:rank]) for rank in range(len(gathered))]
    lengths_all = torch.cat([lens for lens, _, _ in gathered])
    micro_all = torch.cat([torch.where(micro >= 0, micro + offset, micro) for (_, micro, _), offset in zip(gathered, micro_offsets)])
    weights = get_loss_type(cfg.loss_type)(lengths_all, micro_all, cfg.max_new_tokens)
    return weights[start : start + n]


def _token_logprobs(model, mb: MicroBatch, cfg: TrainConfig, with_entropy: bool = False, casts: FrozenWeightCasts | None = None):
    device = next(model.parameters()).device
    forward = shared_prompt_logprobs if isinstance(mb.packed, SharedPromptBatch) else completion_logprobs
    with precision_context(cfg.precision, device), casts.lent() if casts is not None else contextlib.nullcontext():
        return forward(model, mb.packed, cfg.temperature, with_entropy=with_entropy)


def prepare_fixed_logprobs(
    model, micro_batches: list[MicroBatch], cfg: TrainConfig, reference: Reference = BASE, casts: FrozenWeightCasts | None = None
) -> None:
    """Reference log-probs (beta > 0) and, for mu > 1, the behaviour policy's log-probs, once per batch.

    While the policy still is π_ref (`Reference.is_policy`: a run's first step) the reference pass is
    left out, since its log-probs are the behaviour policy's: the stored ones for mu > 1, else those of
    the update's own first forward, detached (`MicroBatch.ref_is_policy`). The same numbers, one forward
    pass fewer: about a fifth of a step's time on a CPU."""
    ref_is_policy = cfg.beta > 0 and reference.is_policy(model)
    casts = casts or FrozenWeightCasts(model, cfg.precision)
    with torch.no_grad():
        for mb in micro_batches:
            if cfg.beta > 0 and not ref_is_policy:
                with reference.policy(model):
                    mb.ref_logp = _token_logprobs(model, mb, cfg, casts=casts).logp
            if cfg.num_iterations > 1:
                mb.old_logp = _token_logprobs(model, mb, cfg, casts=casts).logp
            if ref_is_policy:
                mb.ref_logp, mb.ref_is_policy = mb.old_logp, True


class PhaseClock:
    """Seconds per phase of a step, summed over laps (`time/<phase>_s` metrics: the step's time budget).
    On CUDA each lap waits for the device, so a phase is charged for its own kernels."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._last = self._now()
        self.seconds: dict[str, float] = {}

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def lap(self, phase: str) -> None:
        now = self._now()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last
        self._last = now

    def metrics(self) -> dict[str, float]:
        return {f"time/{phase}_s": seconds for phase, seconds in self.seconds.items()}


def policy_update(
    model,
    trainer_model,
    optimizer: torch.optim.Optimizer,
    scheduler,
    batch: GroupBatch,
    advantages: torch.Tensor,
    cfg: TrainConfig,
    pad_id: int,
    ctx: DistContext,
    reference: Reference = BASE,
    extra_loss: Callable[[bool], dict[str, float]] | None = None,
) -> dict[str, float]:
    """mu optimizer steps on one batch; returns metrics summed over ranks, averaged over iterations.

    `model` is the peft model (π_ref through `reference`), `trainer_model` the module that
    takes gradients (the DDP wrapper when distributed, else `model` itself). `extra_loss(no_sync)`
    runs its own backward into the same gradient before the micro-batches, every iteration (under
    DDP without the all-reduce, which the last micro-batch does for both); its metrics, this rank's
    share of the step's means, are summed over ranks and averaged over iterations.
    """
    device = next(model.parameters()).device
    micro_batches = plan_micro_batches(
        batch, cfg.groups_per_micro_batch, pad_id, cfg.share_prompts, cfg.rows_per_forward, cfg.forward_chunks
    )
    weights = global_token_weights(batch, micro_batches, cfg, ctx).to(device)
    micro_batches = [mb.to(device) for mb in micro_batches]
    advantages = advantages.to(device)
    clock = PhaseClock(device)
    casts = FrozenWeightCasts(model, cfg.precision)
    prepare_fixed_logprobs(model, micro_batches, cfg, reference, casts)
    clock.lap("reference")  # the reference (and stored old) log-probs: forward passes without gradient
    trainable = [p for p in model.parameters() if p.requires_grad]
    # [loss, kl*mask, tokens, clip_low, clip_high, entropy*mask]
    totals = torch.zeros(6, dtype=torch.float64)
    mismatch = torch.zeros(4, dtype=torch.float64)  # [sum |Δ log p|, tokens, outside [C_min, C_max], max |Δ|]
    grad_norms, lrs = [], []
    extra: dict[str, float] = {}
    for iteration in range(cfg.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        if extra_loss is not None:
            for key, value in extra_loss(ctx.enabled and bool(micro_batches)).items():  # a later backward all-reduces
                extra[key] = extra.get(key, 0.0) + value / cfg.num_iterations
        for j, mb in enumerate(micro_batches):
            last = j == len(micro_batches) - 1
            sync = contextlib.nullcontext() if (last or not ctx.enabled) else trainer_model.no_sync()
            with sync:
                stats = _token_logprobs(trainer_model, mb, cfg, with_entropy=True, casts=casts)
                logp = stats.logp
                old = mb.old_logp if mb.old_logp is not None else logp.detach()
                ref = logp.detach() if mb.ref_is_policy and mb.ref_logp is None else mb.ref_logp
                if mb.engine_logp is not None and iteration == 0:
                    mb.is_weight, seen = importance_weights(old, mb.engine_logp, mb.packed.completion_mask, cfg.rollout.importance_sampling)
                    mismatch[:3] += seen[:3]
                    mismatch[3] = max(mismatch[3], seen[3])
                mask = mb.packed.completion_mask
                terms = clipped_token_loss(
                    logp,
                    old,
                    ref,
                    advantages[mb.positions],
                    cfg.epsilon_low,
                    cfg.epsilon_high,
                    cfg.beta,
                    cfg.kl_ratio_correction,
                    is_weight=mb.is_weight,
                    mask=mask,
                    policy_loss=cfg.policy_loss,
                )
                w = weights[mb.positions].to(logp.dtype).unsqueeze(1)
                loss = (terms.loss * mask * w).sum()
                if not torch.isfinite(loss):
                    group_ids = sorted({batch.rollouts[i].group_id for i in mb.positions})
                    raise TrainingError(f"non-finite loss {loss.item()} in micro-batch of groups {group_ids}")
                (loss * ctx.world_size).backward()
            totals += torch.tensor(
                [
                    loss.item(),
                    (terms.kl * mask).sum().item(),
                    float(mask.sum()),
                    float((terms.clipped_low & mask).sum()),
                    float((terms.clipped_high & mask).sum()),
                    (stats.entropy * mask).sum().item(),
                ],
                dtype=torch.float64,
            )
        clock.lap("forward_backward")
        grad_norm = torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
        if not math.isfinite(float(grad_norm)):
            raise TrainingError(f"non-finite gradient norm at iteration {iteration + 1}; no checkpoint written")
        optimizer.step()
        lrs.append(optimizer.param_groups[0]["lr"])
        if scheduler is not None:
            scheduler.step()
        grad_norms.append(float(grad_norm))
        clock.lap("optimizer")
    recorded = float(any(mb.engine_logp is not None for mb in micro_batches))
    totals, recorded = ctx.all_reduce_sum(torch.cat([totals, torch.tensor([recorded], dtype=torch.float64)])).split([6, 1])
    mismatch_metrics = {}
    # every rank joins the mismatch collectives when any rank's rollouts carry the engine's log-probs
    # (a rank whose groups are all decision groups has none: they are the trainer's own prefill)
    if recorded.item() > 0:
        largest = max(ctx.all_gather_object(float(mismatch[3])))
        abs_sum, seen_tokens, outside = ctx.all_reduce_sum(mismatch[:3]).tolist()
        mismatch_metrics = {
            "mismatch/abs_logp_diff_mean": abs_sum / max(seen_tokens, 1.0),
            "mismatch/abs_logp_diff_max": largest,
            "mismatch/is_clipped_share": outside / max(seen_tokens, 1.0),
        }
    if extra:  # every rank has its share of the extra loss's groups (group_schedule), so every rank joins
        extra = dict(zip(sorted(extra), ctx.all_reduce_sum(torch.tensor([extra[k] for k in sorted(extra)], dtype=torch.float64)).tolist()))
    loss_sum, kl_sum, tokens, clip_low, clip_high, entropy_sum = totals.tolist()
    per_token = max(tokens, 1.0)
    return {
        **clock.metrics(),
        "loss": loss_sum / cfg.num_iterations,
        "kl": kl_sum / per_token,
        "clip_ratio_low": clip_low / per_token,
        "clip_ratio_high": clip_high / per_token,
        "clip_ratio_region": (clip_low + clip_high) / per_token,
        "token_entropy": entropy_sum / per_token,
        "tokens": tokens / cfg.num_iterations,
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "lr": lrs[-1],
        "micro_batches": float(len({mb.micro_id for mb in micro_batches})),
        "forward_chunks": float(len(micro_batches)),
        **mismatch_metrics,
        **extra,
    }
