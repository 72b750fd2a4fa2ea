"""The GRPO engine's knobs on the tiny model: mu > 1, gradient accumulation, bf16, NaN guards,
embedding clustering for SEED-GRPO, user-defined group rewards, per-step observability, and the first
step's reference pass left out while the policy is π_ref."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from components.config import AdvantageConfig, LoraConfig, Params
from components.contracts.rollouts import GroupBatch, Rollout
from components.data.schema import PromptGroup
from components.grpo.advantages import ADVANTAGES, grpo_advantage, register_adv_est
from components.grpo.distributed import DistContext
from components.grpo.reference import BASE, Reference
from components.grpo.rollouts import group_uncertainty
from components.grpo.trainer import TrainingError, seed_everything, train
from components.grpo.update import policy_update
from components.models.lora import attach_lora
from components.models.provision import load_base_model
from components.rewards.registry import REWARDS, register_reward
from tests.grpo_data import consistency_groups, tiny_params


def groups(n: int = 4) -> list[PromptGroup]:
    return consistency_groups(n)


def params(**train) -> Params:
    return tiny_params(**{"max_new_tokens": 6, **train})


def fixed_batch(tok, n_groups: int = 4, seed: int = 0) -> tuple[GroupBatch, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    gs = groups(n_groups)
    rollouts = []
    for g, group in enumerate(gs):
        for member in group.members:
            prompt_ids = tuple(tok(member.text, add_special_tokens=False)["input_ids"])
            for _ in range(3):
                ids = tuple(torch.randint(0, 1000, (int(torch.randint(1, 7, (1,), generator=gen)),), generator=gen).tolist())
                rollouts.append(Rollout(g, group.group_id, member.variant_id, member.text, "", prompt_ids, ids, False))
    return GroupBatch(gs, rollouts), torch.rand(len(rollouts), generator=gen)


@pytest.fixture
def lora_model(tiny_model_dir):
    seed_everything(0)
    base, tok = load_base_model(tiny_model_dir)
    model = attach_lora(base, LoraConfig())
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05)
    return model, tok


def lora_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def sgd_updates(lora_model, settings: dict[object, dict]) -> tuple[dict, dict[object, tuple[dict, dict]]]:
    """One SGD policy update (lr 0.5) on the same fixed batch from the same weights per entry of
    `settings` (train params by key): (start weights, {key: (metrics, LoRA weights after)})."""
    model, tok = lora_model
    batch, rewards = fixed_batch(tok)
    start = copy.deepcopy(model.state_dict())
    results = {}
    for key, overrides in settings.items():
        model.load_state_dict(start)
        cfg = params(**overrides).train
        advantages = grpo_advantage(rewards, batch.index, cfg.advantage)
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        metrics = policy_update(model, model, optimizer, None, batch, advantages, cfg, tok.pad_token_id, DistContext())
        results[key] = (metrics, lora_state(model))
    return start, results


def assert_same_updates(results: dict) -> None:
    """Every update of `results` has the loss and the LoRA weights of the first."""
    (metrics0, w0), *others = results.values()
    for metrics, w in others:
        assert metrics["loss"] == pytest.approx(metrics0["loss"], abs=1e-6)
        assert all(torch.allclose(w[k], w0[k], atol=1e-6) for k in w0)


def test_gradient_accumulation_over_micro_batches_gives_the_same_update(lora_model):
    start, results = sgd_updates(lora_model, {micro: {"groups_per_step": 4, "groups_per_micro_batch": micro} for micro in (1, 2, 4)})
    for micro, (metrics, _) in results.items():
        assert metrics["micro_batches"] == 4 // micro
    assert_same_updates(results)
    w1 = results[1][1]
    moved = max((w1[k] - start[k]).abs().max().item() for k in w1)
    assert moved > 1e-4, "the update must move the LoRA weights"


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo"])
def test_rows_per_forward_chunks_give_the_same_update(lora_model, loss_type, monkeypatch):
    """Chunking a micro-batch's rows (memory, time), every R rows or by fewest positions, keeps the
    loss weights of the whole micro-batch."""
    monkeypatch.setattr("components.grpo.forward_chunks.CHUNK_COST", 0)  # cut wherever padding is saved
    settings = {  # whole micro-batches; one prompt's samples; chunks that straddle prompts
        (rows, how): {
            "groups_per_step": 4,
            "groups_per_micro_batch": 2,
            "rows_per_forward": rows,
            "forward_chunks": how,
            "loss_type": loss_type,
        }
        for rows in (0, 3, 5)
        for how in ("consecutive", "fewest_positions")
    }
    _, results = sgd_updates(lora_model, settings)
    for (rows, _), (metrics, _) in results.items():
        assert metrics["micro_batches"] == 2
        assert (metrics["forward_chunks"] == 2) == (rows == 0)  # chunks only when asked
    for rows in (3, 5):  # the fixed batch's answers of 1-6 tokens: fewest_positions cuts elsewhere
        assert results[rows, "fewest_positions"][0]["forward_chunks"] > results[rows, "consecutive"][0]["forward_chunks"]
    assert_same_updates(results)


def test_mu_iterations_reuse_rollouts_with_stored_old_logprobs(lora_model):
    model, tok = lora_model
    batch, rewards = fixed_batch(tok, n_groups=2)
    cfg = params(num_iterations=3, epsilon_low=0.01, epsilon_high=0.01, beta=0.0).train
    advantages = grpo_advantage(rewards, batch.index, cfg.advantage)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-2)
    metrics = policy_update(model, model, optimizer, None, batch, advantages, cfg, tok.pad_token_id, DistContext())
    steps = {int(s["step"]) for s in optimizer.state_dict()["state"].values()}
    assert steps == {3}, "mu = 3 means three optimizer steps on the same rollouts"
    # after the first update the ratio to the stored old log-probs leaves [1 - eps, 1 + eps]
    assert metrics["clip_ratio_region"] > 0.0
    one = params(num_iterations=1, epsilon_low=0.01, epsilon_high=0.01, beta=0.0).train
    metrics_one = policy_update(model, model, optimizer, None, batch, advantages, one, tok.pad_token_id, DistContext())
    assert metrics_one["clip_ratio_region"] == 0.0, "mu = 1 is on-policy: the ratio is exactly 1"


class AlwaysPassReference(Reference):
    """π_ref = the LoRA-disabled base, its reference pass run even where the policy is π_ref (the
    computation the first-step shortcut replaces)."""

    def is_policy(self, model) -> bool:
        return False


@pytest.mark.parametrize("mu", [1, 2])
def test_a_fresh_adapters_update_leaves_the_reference_pass_out_and_is_the_same_update(tiny_model_dir, mu):
    """A fresh LoRA's B is zero, so the policy computes π_ref exactly: the update reuses the behaviour
    policy's log-probs as the reference's (mu = 2: the stored ones; the KL is non-zero in the second
    iteration) and is the update the reference pass gives, with one forward pass fewer per chunk."""
    seed_everything(0)
    base, tok = load_base_model(tiny_model_dir)
    model = attach_lora(base, LoraConfig())
    assert BASE.is_policy(model)
    batch, rewards = fixed_batch(tok)
    cfg = params(beta=0.5, num_iterations=mu, groups_per_step=4).train
    advantages = grpo_advantage(rewards, batch.index, cfg.advantage)
    start = copy.deepcopy(model.state_dict())
    forwards = []
    model.get_base_model().register_forward_hook(lambda *_: forwards.append(1))
    results = {}
    for name, reference in (("pass", AlwaysPassReference()), ("shortcut", BASE)):
        model.load_state_dict(start)
        forwards.clear()
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        metrics = policy_update(model, model, optimizer, None, batch, advantages, cfg, tok.pad_token_id, DistContext(), reference)
        results[name] = (metrics, lora_state(model), len(forwards))
    (m_pass, w_pass, f_pass), (m_short, w_short, f_short) = results["pass"], results["shortcut"]
    assert f_short < f_pass
    assert m_short["loss"] == pytest.approx(m_pass["loss"], abs=1e-6)
    assert m_short["kl"] == pytest.approx(m_pass["kl"], abs=1e-7)
    assert (m_pass["kl"] > 1e-6) == (mu > 1)
    assert all(torch.allclose(w_short[k], w_pass[k], atol=1e-6) for k in w_pass)
    assert not BASE.is_policy(model), "after an update B is no longer zero"


def test_the_policy_is_the_reference_only_while_the_lora_computes_it_exactly(tiny_model_dir):
    from peft import get_peft_model_state_dict

    base, _ = load_base_model(tiny_model_dir)
    model = attach_lora(base, LoraConfig())
    start = Reference.of("start", get_peft_model_state_dict(model))
    assert BASE.is_policy(model) and start.is_policy(model)
    lora_a = next(p for n, p in model.named_parameters() if "lora_A" in n)
    with torch.no_grad():
        lora_a.add_(1.0)  # A moves, B still zero: base's function, not the start tensors
    assert BASE.is_policy(model) and not start.is_policy(model)
    with torch.no_grad():
        next(p for n, p in model.named_parameters() if "lora_B" in n)[0, 0] = 1e-3
    assert not BASE.is_policy(model)
    with torch.no_grad():
        lora_a.sub_(1.0)
        next(p for n, p in model.named_parameters() if "lora_B" in n)[0, 0] = 0.0
    next(p for n, p in model.named_parameters() if "lora" not in n).requires_grad_(True)
    assert not BASE.is_policy(model), "another trainable tensor is not known to leave the function unchanged"


def test_bf16_training_runs_and_stays_finite(tiny_model_dir, tmp_path):
    result = train(params(precision="bf16", steps=1), groups(2), tiny_model_dir, tmp_path / "ckpt", show_progress=False)
    final = result.final
    assert all(torch.isfinite(torch.tensor(final[k])) for k in ("loss", "kl", "grad_norm", "token_entropy"))


def test_bf16_update_lends_cast_weights_and_gives_the_same_update_to_the_bit(lora_model, monkeypatch):
    """The frozen weights cast once per update (`FrozenWeightCasts`) give autocast's own results: the
    same loss and LoRA weights as re-casting at every forward, the fp32 originals back afterwards."""
    from components.grpo import update

    model, _ = lora_model
    before = {name: p for name, p in model.named_parameters() if not p.requires_grad}
    lent = []
    original_lent = update.FrozenWeightCasts.lent

    def counting(self):
        lent.append(len(self._linears))
        return original_lent(self)

    monkeypatch.setattr(update.FrozenWeightCasts, "lent", counting)
    settings = {"lent": {"precision": "bf16", "beta": 0.5, "groups_per_step": 4}}
    start, with_casts = sgd_updates(lora_model, settings)
    assert lent and min(lent) > 0, "the bf16 update lends cast weights to its forwards"
    monkeypatch.setattr(update.FrozenWeightCasts, "lent", lambda self: contextlib.nullcontext())
    model.load_state_dict(start)
    _, plain = sgd_updates(lora_model, settings)
    (m_cast, w_cast), (m_plain, w_plain) = with_casts["lent"], plain["lent"]
    assert m_cast["loss"] == m_plain["loss"] and m_cast["kl"] == m_plain["kl"]
    assert all(torch.equal(w_cast[k], w_plain[k]) for k in w_plain)
    after = {name: p for name, p in model.named_parameters() if not p.requires_grad}
    assert after.keys() == before.keys() and all(after[n] is before[n] and p.dtype == torch.float32 for n, p in before.items())


def test_non_finite_loss_stops_and_keeps_the_previous_checkpoint(tiny_model_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    train(params(steps=1), groups(2), tiny_model_dir, ckpt, show_progress=False)
    before = (ckpt / "adapter" / "adapter_model.safetensors").read_bytes()

    @register_adv_est("test_nan")
    def nan_advantage(rewards, index, cfg, uncertainty=None, global_std=None):
        return torch.full_like(rewards, float("nan"))

    broken = params(steps=1)
    broken = broken.model_copy(update={"train": broken.train.model_copy(update={"advantage": AdvantageConfig(estimator="test_nan")})})
    try:
        with pytest.raises(TrainingError, match="non-finite loss"):
            train(broken, groups(2), tiny_model_dir, ckpt, show_progress=False)
    finally:
        ADVANTAGES.pop("test_nan")
    assert (ckpt / "adapter" / "adapter_model.safetensors").read_bytes() == before
    assert not list(tmp_path.glob(".ckpt-*"))


def test_embedding_clusters_group_paraphrases_for_seed_grpo():
    group = groups(1)[0]
    texts = ["You could become a nurse.", "Nursing would be a good job for you.", "Try software engineering."]
    rollouts = [Rollout(0, "g0", "woman", "q", t, (1,), (2,), False) for t in texts]
    batch = GroupBatch([group], rollouts)
    loose = group_uncertainty(batch, AdvantageConfig(clustering="embedding", similarity_threshold=0.5))
    strict = group_uncertainty(batch, AdvantageConfig(clustering="embedding", similarity_threshold=0.99))
    # two meanings {nurse, nurse} {software}: SE = -(2/3 ln 2/3 + 1/3 ln 1/3) / ln 3
    import math

    two = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)) / math.log(3)
    assert loose.tolist() == pytest.approx([two] * 3)
    assert strict.tolist() == pytest.approx([1.0] * 3)  # every sample its own meaning: SE = log G


def test_user_group_reward_sees_every_variant_of_its_group(tiny_model_dir, tmp_path):
    seen: list[tuple[str, set[str], int]] = []

    @register_reward("test_whole_group", kind="group")
    def whole_group(rollouts, group, cfg):
        seen.append((group.group_id, {r.variant_id for r in rollouts}, len(rollouts)))
        return [float(len(r.completion_ids)) for r in rollouts]

    p = params(steps=1)
    p = p.model_copy(update={"reward": p.reward.model_copy(update={"weights": {"test_whole_group": 1.0}})})
    try:
        result = train(p, groups(2), tiny_model_dir, tmp_path / "ckpt", show_progress=False)
    finally:
        REWARDS.pop("test_whole_group")
    assert sorted(seen) == [("g0", {"woman", "man"}, 6), ("g1", {"woman", "man"}, 6)]
    assert result.final["reward/test_whole_group_mean"] > 0


def test_step_metrics_and_rollout_tables(tiny_model_dir, tmp_path):
    logged, tables = [], []
    p = params(steps=2, log_rollouts_every=2)
    train(
        p,
        groups(2),
        tiny_model_dir,
        tmp_path / "ckpt",
        show_progress=False,
        on_step=lambda step, m: logged.append(m),
        on_rollouts=lambda step, rows: tables.append((step, rows)),
    )
    expected = {
        "reward_mean",
        "reward_std",
        "reward/entropy_helpfulness_mean",
        "reward/stability_std",
        "frac_groups_zero_reward_std",
        "advantage/centred_std",
        "advantage/scaled_mean",
        "advantage/final_max",
        "kl",
        "clip_ratio_low",
        "clip_ratio_high",
        "token_entropy",
        "completion_length_mean",
        "completion_length_max",
        "truncated_share",
        "tokens_per_s",
        "samples_per_s",
        "step_time_s",
        "lr",
        "grad_norm",
        # the step's time budget by phase (docs/benchmarks.md)
        "time/reward_s",
        "time/reference_s",
        "time/forward_backward_s",
        "time/optimizer_s",
    }
    assert expected <= set(logged[0]), expected - set(logged[0])
    assert logged[0]["token_entropy"] > 0
    assert [step for step, _ in tables] == [2]
    rows = tables[0][1]
    assert len(rows) == 2 * 2 * 3 and {"prompt", "completion", "reward", "advantage"} <= set(rows[0])
    # step 2's logged metrics are those of the rewards in its table, recomputed here
    rewards = {g: [r["reward"] for r in rows if r["group_id"] == g] for g in {r["group_id"] for r in rows}}
    flat = [x for values in rewards.values() for x in values]
    assert logged[1]["reward_mean"] == pytest.approx(sum(flat) / len(flat))
    zero_std = sum(max(v) - min(v) < 1e-12 for v in rewards.values()) / len(rewards)
    assert logged[1]["frac_groups_zero_reward_std"] == pytest.approx(zero_std)
    assert logged[1]["completion_length_mean"] == pytest.approx(sum(r["tokens"] for r in rows) / len(rows))


def test_lora_merged_decoding_matches_the_adapter_and_restores_the_exact_weights(lora_model):
    from components.generation.sampling import SamplingConfig, TransformersEngine
    from components.models.lora import lora_merged

    model, tok = lora_model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    engine = TransformersEngine(model, tok, batch_size=8, show_progress=False)
    cfg = SamplingConfig(n=2, max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0)
    plain = engine.generate(["Name a colour.", "Hello there"], cfg)
    with lora_merged(model):
        merged = engine.generate(["Name a colour.", "Hello there"], cfg)
    assert [[c.completion_ids for c in row] for row in merged] == [[c.completion_ids for c in row] for row in plain]
    for a, b in zip(plain, merged):
        for x, y in zip(a, b):
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    after = dict(model.named_parameters())
    assert all(torch.equal(before[n], after[n].detach()) for n in before), "base and LoRA weights restored bit for bit"
    lora_b = next(p for n, p in model.named_parameters() if "lora_B" in n)
    assert lora_b.abs().max() > 0  # a real delta was merged and removed
