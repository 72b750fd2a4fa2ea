"""Truncated importance sampling for the rollout engine/trainer mismatch, by hand; its use in the
update; the merged weights a running engine is synced with."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from components.config import ImportanceSamplingConfig
from components.contracts.rollouts import GroupBatch
from components.grpo.advantages import grpo_advantage
from components.grpo.distributed import DistContext
from components.grpo.importance_sampling import importance_weights
from components.grpo.losses import clipped_token_loss
from components.grpo.update import _token_logprobs, plan_micro_batches, policy_update
from tests.unit.test_grpo_engine import fixed_batch, lora_model, lora_state, params  # noqa: F401

TRAINER = torch.tensor([[-1.0, -2.0, -7.0]])
ENGINE = torch.tensor([[-1.5, -0.5, 3.0]])  # the third column is padding
MASK = torch.tensor([[True, True, False]])


def weights(mode: str, clip_max: float = 1.5, clip_min: float = 0.0):
    return importance_weights(TRAINER, ENGINE, MASK, ImportanceSamplingConfig(mode=mode, clip_max=clip_max, clip_min=clip_min))


def test_token_truncate_and_mask_by_hand():
    # Δ = trainer − engine = [0.5, −1.5]: ρ = [e^0.5 = 1.649, e^−1.5 = 0.223]
    w, stats = weights("token_truncate")
    assert w[0, :2].tolist() == pytest.approx([1.5, math.exp(-1.5)])
    assert stats.tolist() == pytest.approx([2.0, 2.0, 1.0, 1.5])  # Σ|Δ|, tokens, outside [0, 1.5], max |Δ|
    w, _ = weights("token_mask")
    assert w[0, :2].tolist() == pytest.approx([0.0, math.exp(-1.5)])
    w, stats = weights("token_truncate", clip_max=3.0, clip_min=0.5)
    assert w[0, :2].tolist() == pytest.approx([math.exp(0.5), 0.5]) and stats[2] == 1.0


def test_sequence_modes_use_the_summed_log_ratio():
    w, stats = weights("sequence_truncate")  # Σ Δ = −1: ρ = e^−1 for the whole sequence
    assert w.shape == (1, 1) and w.item() == pytest.approx(math.exp(-1.0))
    assert stats[2] == 0.0
    w, stats = weights("sequence_mask", clip_max=3.0, clip_min=0.5)  # e^−1 = 0.37 < 0.5: masked
    assert w.item() == 0.0 and stats[2] == 2.0  # both tokens of the sequence count as outside


def test_mode_none_applies_nothing_but_still_measures():
    w, stats = weights("none")
    assert w is None and stats[0].item() == pytest.approx(2.0)


def test_the_weight_scales_the_surrogate_not_the_kl():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -2.0]])
    w = torch.tensor([[0.5, 2.0]])
    plain = clipped_token_loss(logp, logp.detach(), ref, torch.tensor([1.0]), 0.2, 0.2, beta=0.5)
    weighted = clipped_token_loss(logp, logp.detach(), ref, torch.tensor([1.0]), 0.2, 0.2, beta=0.5, is_weight=w)
    kl = 0.5 * plain.kl
    assert (weighted.loss - kl)[0].tolist() == pytest.approx(((plain.loss - kl) * w)[0].tolist())


def with_engine_logprobs(batch: GroupBatch, logprobs: list[tuple[float, ...]]) -> GroupBatch:
    rollouts = [dataclasses.replace(r, behaviour_logprobs=lp) for r, lp in zip(batch.rollouts, logprobs)]
    return GroupBatch(batch.groups, rollouts)


def test_update_with_an_exact_engine_equals_the_plain_update_and_logs_the_mismatch(lora_model):  # noqa: F811
    model, tok = lora_model
    batch, rewards = fixed_batch(tok)
    # the loss is the surrogate alone, the gradient unclipped: the update is linear in the weights
    cfg = params(groups_per_step=4, groups_per_micro_batch=2, beta=0.0, max_grad_norm=1e9).train
    advantages = grpo_advantage(rewards, batch.index, cfg.advantage)
    # the engine's log-probs = the trainer's own (an engine with no mismatch): ρ = 1 everywhere
    exact = []
    model.eval()
    with torch.no_grad():
        for mb in plan_micro_batches(batch, 2, tok.pad_token_id):
            logp = _token_logprobs(model, mb, cfg).logp
            for row, i in enumerate(mb.positions):
                exact.append((i, tuple(logp[row, : len(batch.rollouts[i].completion_ids)].tolist())))
    exact_lp = [lp for _, lp in sorted(exact)]
    start = copy.deepcopy(model.state_dict())
    results = {}
    for name, b in {"plain": batch, "exact": with_engine_logprobs(batch, exact_lp),
                    "off": with_engine_logprobs(batch, [tuple(x - 1.0 for x in lp) for lp in exact_lp])}.items():  # fmt: skip
        model.load_state_dict(start)
        model.eval()  # no dropout: the trainer's log-probs are those measured above
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        metrics = policy_update(model, model, optimizer, None, b, advantages, cfg, tok.pad_token_id, DistContext())
        results[name] = (metrics, lora_state(model))
    plain, exact_run, off = results["plain"], results["exact"], results["off"]
    assert "mismatch/abs_logp_diff_mean" not in plain[0]
    assert exact_run[0]["mismatch/abs_logp_diff_mean"] < 1e-5 and exact_run[0]["mismatch/is_clipped_share"] == 0.0
    assert all(torch.allclose(exact_run[1][k], plain[1][k], atol=1e-6) for k in plain[1])
    # an engine that gave every token 1 nat less: ρ = e ≈ 2.72 < C_max = 3, every surrogate ×e, so
    # (SGD, constant weights) the step is e times the plain step
    assert off[0]["mismatch/abs_logp_diff_mean"] == pytest.approx(1.0, abs=1e-4)
    initial = {k: v for k, v in start.items() if k in plain[1]}
    for k in plain[1]:
        assert torch.allclose(off[1][k] - initial[k], math.e * (plain[1][k] - initial[k]), atol=1e-5), k
    assert max((plain[1][k] - initial[k]).abs().max().item() for k in initial) > 1e-4


def test_merged_weights_are_those_of_merge_and_unload(lora_model):  # noqa: F811
    from components.models.lora import merged_weights

    model, _ = lora_model
    adapted = dict(merged_weights(model))
    full = dict(merged_weights(model, "bfloat16", full=True))
    lora_before = lora_state(model)
    reference = copy.deepcopy(model).merge_and_unload().state_dict()
    assert adapted and all(name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")) for name in adapted)
    for name, tensor in adapted.items():
        assert torch.allclose(tensor, reference[name], atol=1e-6), name
    assert set(full) == set(reference) - {"lm_head.weight"}  # tied to the embeddings
    assert all(t.dtype == torch.bfloat16 for t in full.values())
    assert all(torch.equal(lora_before[k], v) for k, v in lora_state(model).items())  # the model is untouched
