"""GRPO on decision groups with the tiny random model (the real tokenizer): one-token rollouts with
the policy's own log-odds, training with decision_parity, and starting from a saved adapter."""

import pytest
import torch
from safetensors.torch import load_file

from components.generation.sampling import SamplingConfig, answer_prompt, single_token_ids
from components.grpo.checkpoint import ADAPTER_DIR
from components.grpo.decisions import decision_rollouts
from components.grpo.trainer import train
from components.models.lora import InitAdapterError
from components.models.provision import load_base_model
from tests.grpo_data import DECISION_SPEC as SPEC
from tests.grpo_data import consistency_groups, decision_group, tiny_params


def decision_params(**train):
    params = tiny_params(**train)
    return params.model_copy(update={"reward": params.reward.model_copy(update={"weights": {"decision_parity": 1.0}})})


def test_decision_rollouts_carry_the_policys_log_odds_and_k_one_token_samples(tiny_model_dir):
    model, tokenizer = load_base_model(tiny_model_dir, "float32")
    groups = [(0, decision_group(0)), (1, decision_group(1))]
    sampling = SamplingConfig(n=4, max_new_tokens=8, temperature=1.0, top_p=1.0, seed=7)
    rollouts = decision_rollouts(model, tokenizer, groups, sampling, batch_size=2)  # 6 prompts in 3 forward passes
    assert len(rollouts) == 2 * 3 * 4 and all(len(r.completion_ids) == 1 and not r.truncated for r in rollouts)
    yes, no = single_token_ids(tokenizer, ("yes", "Yes"), "t"), single_token_ids(tokenizer, ("no", "No"), "t")
    for group_index, group in groups:
        for member in group.members:
            enc = tokenizer(answer_prompt(tokenizer, member.text, SPEC.answer_prefix), return_tensors="pt", add_special_tokens=False)
            with torch.no_grad():
                logp = torch.log_softmax(model(**enc).logits[0, -1].float(), dim=-1)
            expected = float(torch.logsumexp(logp[yes], 0) - torch.logsumexp(logp[no], 0))
            mine = [r for r in rollouts if r.group_index == group_index and r.variant_id == member.variant_id]
            assert len(mine) == 4 and all(r.decision_logodds == pytest.approx(expected, abs=1e-4) for r in mine)
            assert mine[0].prompt_ids == tuple(enc["input_ids"][0].tolist())  # the prompt the update scores
    again = decision_rollouts(model, tokenizer, groups, sampling, batch_size=2)
    assert [r.completion_ids for r in again] == [r.completion_ids for r in rollouts]  # seeded


def test_training_on_decision_groups_logs_their_spread_and_mixes_with_free_text(tiny_model_dir, tmp_path):
    groups = [decision_group(i) for i in range(2)] + consistency_groups(2)
    params = decision_params(steps=2, groups_per_step=4)
    weights = {"decision_parity": 1.0, "entropy_helpfulness": 0.4, "stability": 0.6}  # each scores its own groups
    result = train(params.model_copy(update={"reward": params.reward.model_copy(update={"weights": weights})}),
                   groups, tiny_model_dir, tmp_path / "a", show_progress=False)  # fmt: skip
    assert all(h["decision/spread_mean"] > 0 for h in result.history)
    assert all(h["reward/entropy_helpfulness_mean"] > 0 for h in result.history)  # the free-text groups' answers
    assert (tmp_path / "a" / ADAPTER_DIR / "adapter_model.safetensors").is_file()


def test_a_run_can_start_from_a_saved_adapter(tiny_model_dir, tmp_path):
    first = tiny_params(steps=1, groups_per_step=2)  # the text rewards: the random model's answers move the adapter
    train(first, consistency_groups(2), tiny_model_dir, tmp_path / "start", show_progress=False)
    # lr 0: the run changes nothing, so its adapter is exactly the one it started from
    frozen = first.model_copy(update={"train": first.train.model_copy(update={"lr": 0.0, "init_adapter": tmp_path / "start"})})
    train(frozen, consistency_groups(2), tiny_model_dir, tmp_path / "again", show_progress=False)
    start = load_file(tmp_path / "start" / ADAPTER_DIR / "adapter_model.safetensors")
    again = load_file(tmp_path / "again" / ADAPTER_DIR / "adapter_model.safetensors")
    assert start.keys() == again.keys() and any(v.abs().sum() > 0 for k, v in start.items() if "lora_B" in k)
    assert all(torch.equal(start[k], again[k]) for k in start)
    missing = first.model_copy(update={"train": first.train.model_copy(update={"init_adapter": tmp_path / "nowhere"})})
    with pytest.raises(InitAdapterError, match="nowhere"):
        train(missing, consistency_groups(1), tiny_model_dir, tmp_path / "x", show_progress=False)


def test_counterfactual_logit_pairing_pulls_the_variants_log_odds_together(tiny_model_dir, tmp_path):
    params = decision_params(steps=6, groups_per_step=2, lr=1e-4, objective="counterfactual_logit_pairing")
    result = train(params, [decision_group(i) for i in range(2)], tiny_model_dir, tmp_path / "clp", show_progress=False)
    spreads = [h["decision/spread_mean"] for h in result.history]  # the same two groups every step, before its update
    assert spreads[-1] < 0.5 * spreads[0], spreads
    assert result.history[0]["kl"] == 0.0 and result.history[-1]["kl"] > 0.0  # starts at the reference
    with pytest.raises(ValueError, match="decision group"):
        train(params, consistency_groups(2), tiny_model_dir, tmp_path / "text", show_progress=False)


def test_the_kl_reference_can_be_the_adapter_a_run_starts_from(tiny_model_dir, tmp_path):
    from peft import get_peft_model_state_dict

    from components.grpo.reference import Reference
    from components.models.lora import attach_lora

    first = tiny_params(steps=1, groups_per_step=2, lr=1e-2)
    train(first, consistency_groups(2), tiny_model_dir, tmp_path / "start", show_progress=False)
    start = tmp_path / "start"

    def second(reference):  # continues from the start adapter, KL to `reference`
        cfg = first.train.model_copy(update={"init_adapter": start, "reference": reference, "beta": 0.1, "steps": 1})
        return train(
            first.model_copy(update={"train": cfg}), consistency_groups(2), tiny_model_dir, tmp_path / reference, show_progress=False
        )

    assert second("start").history[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # π_θ = π_ref before the first update
    assert second("base").history[0]["kl"] > 1e-4  # the start adapter is not the base model
    with pytest.raises(ValueError, match="reference: start needs train.init_adapter"):
        type(first.train).model_validate(first.train.model_dump() | {"reference": "start"})

    model = attach_lora(load_base_model(tiny_model_dir, "float32")[0], first.lora)
    weights = start / ADAPTER_DIR / "adapter_model.safetensors"
    trained = {k: v.clone() for k, v in get_peft_model_state_dict(model).items()}  # a fresh LoRA: B = 0
    reference = Reference.of("start", load_file(weights))
    with torch.no_grad(), reference.policy(model):
        inside = get_peft_model_state_dict(model)
        assert all(torch.equal(inside[k], v) for k, v in load_file(weights).items())
    after = get_peft_model_state_dict(model)
    assert all(torch.equal(after[k], trained[k]) for k in trained)  # the trained weights are back


def test_decision_rollouts_can_carry_the_references_log_odds(tiny_model_dir, tmp_path):
    from components.grpo.reference import BASE
    from components.models.lora import attach_lora

    params = tiny_params()
    base, tokenizer = load_base_model(tiny_model_dir, "float32")
    groups = [(0, decision_group(0))]
    sampling = SamplingConfig(n=2, max_new_tokens=1, temperature=1.0, top_p=1.0, seed=3)
    plain = decision_rollouts(base, tokenizer, groups, sampling, batch_size=3)
    model = attach_lora(base, params.lora)
    torch.manual_seed(0)
    for name, weight in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(weight, std=0.5)  # an adapter that changes the decisions
    tuned = decision_rollouts(model, tokenizer, groups, sampling, batch_size=3, reference=BASE)
    assert all(t.reference_logodds == pytest.approx(p.decision_logodds, abs=1e-4) for t, p in zip(tuned, plain))  # π_ref = base
    assert any(abs(t.decision_logodds - p.decision_logodds) > 1e-3 for t, p in zip(tuned, plain))
    assert all(r.reference_logodds is None for r in decision_rollouts(model, tokenizer, groups, sampling, batch_size=3))


def test_a_fixed_mix_gives_every_step_its_decision_groups_however_many_there_are():
    from components.grpo.trainer import group_schedule

    decided = [decision_group(i) for i in range(40)]
    free = consistency_groups(3)
    pool = group_schedule(decided + free, per_step=3, steps=12, seed=5)
    assert any(all(g.decision is not None for g in step) for step in pool)  # one pool: the 40 crowd out the 3
    mixed = group_schedule(decided + free, per_step=3, steps=12, seed=5, decision_per_step=1)
    assert [sum(g.decision is not None for g in step) for step in mixed] == [1] * 12
    free_order = [g.group_id for step in mixed for g in step if g.decision is None]
    alone = [g.group_id for step in group_schedule(free, per_step=2, steps=12, seed=5) for g in step]
    assert free_order == alone  # the free-text groups drawn as a run on them alone draws them
    assert sorted(free_order[:3]) == sorted(g.group_id for g in free)  # whole epochs of the free-text groups
    assert len({g.group_id for step in mixed for g in step if g.decision is not None}) == 12  # 12 distinct of 40
    again = group_schedule(free + decided, per_step=3, steps=12, seed=5, decision_per_step=1)
    assert [[g.group_id for g in s] for s in again] == [
        [g.group_id for g in s] for s in mixed
    ]  # the kinds' interleaving in the file does not matter
    with pytest.raises(ValueError, match="no decision groups"):
        group_schedule(free, per_step=3, steps=2, seed=5, decision_per_step=1)
    # two processes: each rank's contiguous block (DistContext.shard) holds one group of each kind
    two = group_schedule(decided + free, per_step=4, steps=6, seed=5, decision_per_step=2, ranks=2)
    assert [[g.decision is not None for g in step] for step in two] == [[False, True, False, True]] * 6
    with pytest.raises(ValueError, match="must split evenly over the 2 processes"):
        group_schedule(decided + free, per_step=3, steps=2, seed=5, decision_per_step=1, ranks=2)


def test_the_mix_must_leave_room_for_free_text_groups():
    from pydantic import ValidationError

    from components.config import TrainConfig

    assert TrainConfig(groups_per_step=3, decision_groups_per_step=1).decision_groups_per_step == 1
    with pytest.raises(ValidationError, match="decision_groups_per_step \\(2\\) must be below groups_per_step \\(2\\)"):
        TrainConfig(groups_per_step=2, decision_groups_per_step=2)
    with pytest.raises(ValidationError, match="objective counterfactual_logit_pairing trains on decision groups only"):
        TrainConfig(groups_per_step=3, decision_groups_per_step=1, objective="counterfactual_logit_pairing")


def test_training_with_a_fixed_mix_scores_both_kinds_every_step(tiny_model_dir, tmp_path):
    groups = [decision_group(i) for i in range(6)] + consistency_groups(1)
    params = decision_params(steps=2, groups_per_step=2, decision_groups_per_step=1)
    weights = {"decision_parity": 1.0, "entropy_helpfulness": 0.4, "stability": 0.6}
    result = train(params.model_copy(update={"reward": params.reward.model_copy(update={"weights": weights})}),
                   groups, tiny_model_dir, tmp_path / "a", show_progress=False)  # fmt: skip
    assert all(h["decision/spread_mean"] > 0 and h["reward/entropy_helpfulness_mean"] > 0 for h in result.history)


def test_decision_groups_can_keep_their_rewards_size_beside_free_text_groups_scaled_per_group():
    """advantage.decision_scale none: a decision group's advantages are its centred rewards
    (decision_parity's distance from the target), the free-text group's stay scaled by its std."""
    from components.contracts.rollouts import GroupBatch, Rollout
    from components.grpo.distributed import DistContext
    from components.grpo.trainer import score_batch

    decided, free = decision_group(0), consistency_groups(1)[0]
    rollouts = [
        Rollout.of(0, decided, m, completion=answer, prompt_ids=(1,), completion_ids=(2,), truncated=False, decision_logodds=0.01 * v)
        for v, m in enumerate(decided.members)
        for answer in ("yes", "no", "yes")
    ]
    answers = ("Bonds and index funds.", "Stocks, bonds, cash and property funds for the long run.", "Gold.")
    rollouts += [
        Rollout.of(1, free, m, completion=a, prompt_ids=(1,), completion_ids=(2, 3), truncated=False) for m in free.members for a in answers
    ]
    batch = GroupBatch([decided, free], rollouts)
    params = decision_params()
    weights = {"decision_parity": 1.0, "entropy_helpfulness": 0.4, "stability": 0.6}
    params = params.model_copy(update={"reward": params.reward.model_copy(update={"weights": weights})})

    def scored(decision_scale):
        advantage = params.train.advantage.model_copy(update={"decision_scale": decision_scale})
        p = params.model_copy(update={"train": params.train.model_copy(update={"advantage": advantage})})
        advantages, _, rewards = score_batch(batch, p, DistContext())
        return advantages.double(), rewards.double()

    same, rewards = scored(None)
    own, _ = scored("none")
    d, f = batch.rollouts_of(0), batch.rollouts_of(1)
    assert torch.allclose(own[d], rewards[d] - rewards[d].mean(), atol=1e-6)  # unscaled: the reward's own size
    assert torch.allclose(own[f], same[f]) and torch.allclose(
        own[f], (rewards[f] - rewards[f].mean()) / (rewards[f].std() + 1e-4), atol=1e-5
    )
    assert rewards[d].std() < 0.5 and same[d].abs().max() > 2 * own[d].abs().max()  # scaled per group, small distances were pushed hard


def pairing_params(**train):
    """GRPO on the free-text groups with the paper's text rewards, the decision groups by the pairing term."""
    params = tiny_params(**train)
    weights = {"entropy_helpfulness": 0.4, "stability": 0.6}
    return params.model_copy(update={"reward": params.reward.model_copy(update={"weights": weights})})


def test_the_pairing_term_trains_the_decision_groups_without_sampling_them_beside_grpo(tiny_model_dir, tmp_path):
    from components.config import DecisionPairingConfig

    term = DecisionPairingConfig(weight=1.0, beta=0.2)
    params = pairing_params(steps=8, groups_per_step=2, decision_groups_per_step=1, lr=1e-4, decision_pairing=term)
    result = train(params, [decision_group(0)] + consistency_groups(1), tiny_model_dir, tmp_path / "a", show_progress=False)
    spreads = [h["decision/spread_mean"] for h in result.history]  # the one decision group every step, before its update
    assert spreads[-1] < 0.5 * spreads[0], spreads
    assert result.history[0]["decision/kl"] == 0.0 and result.history[-1]["decision/kl"] > 0.0  # starts at the reference
    assert all(h["samples"] == 2 * 3 for h in result.history)  # only the free-text group is sampled: 2 variants x K = 3
    assert all(h["reward/entropy_helpfulness_mean"] > 0 for h in result.history)
    off = params.model_copy(update={"train": params.train.model_copy(update={"decision_pairing": DecisionPairingConfig(weight=0.0)})})
    plain = train(off, [decision_group(0)] + consistency_groups(1), tiny_model_dir, tmp_path / "b", show_progress=False)
    assert "decision/kl" not in plain.history[0]  # weight 0: the decision group is sampled and rewarded as before


def test_the_pairing_term_refuses_rewards_that_would_score_its_unsampled_groups(tiny_model_dir, tmp_path):
    from pydantic import ValidationError

    from components.config import DecisionPairingConfig, TrainConfig
    from components.grpo.counterfactual import PairingParamsError

    term = DecisionPairingConfig(weight=1.0)
    params = decision_params(steps=1, groups_per_step=2, decision_groups_per_step=1, decision_pairing=term)
    with pytest.raises(PairingParamsError, match=r"\['decision_parity'\] score decision groups"):
        train(params, [decision_group(0)] + consistency_groups(1), tiny_model_dir, tmp_path / "a", show_progress=False)
    with pytest.raises(ValidationError, match="needs objective grpo and decision_groups_per_step"):
        TrainConfig(groups_per_step=2, decision_groups_per_step=None, decision_pairing=term)
    with pytest.raises(ValidationError, match="needs objective grpo and decision_groups_per_step"):
        TrainConfig(groups_per_step=2, decision_groups_per_step=None, objective="counterfactual_logit_pairing", decision_pairing=term)


def test_the_pairing_terms_gradient_is_the_pairing_baselines_times_its_weight(tiny_model_dir):
    """The term alone (no GRPO rows) takes the gradient the counterfactual logit pairing baseline takes, scaled by λ."""
    from components.grpo.counterfactual import PairingTerm, pairing_backward
    from components.models.lora import attach_lora

    base, tokenizer = load_base_model(tiny_model_dir, "float32")
    model = attach_lora(base, tiny_params().lora)
    torch.manual_seed(0)
    for name, weight in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(weight, std=0.2)  # away from the reference: the KL has a gradient
    groups = [decision_group(0), decision_group(1)]

    def grads(weight: float, micro: int) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        parts = pairing_backward(model, model, tokenizer, PairingTerm(groups, 2, weight, beta=0.5, micro_groups=micro))
        assert parts["spread"] > 0 and parts["kl"] > 0
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    one, three, split = grads(1.0, 2), grads(3.0, 2), grads(1.0, 1)
    assert all(torch.allclose(three[n], 3 * one[n], rtol=1e-4, atol=1e-5) for n in one)
    assert all(torch.allclose(split[n], one[n], rtol=1e-4, atol=1e-5) for n in one)  # micro-batching changes memory, not the gradient
    assert max(g.abs().max().item() for g in one.values()) > 0
