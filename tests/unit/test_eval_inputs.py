"""Bad evaluation input fails with a clear cause; the transformers engine on the tiny model."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from components.config import EvalConfig, FairnessConfig, LoraConfig, Params, ParamsError, load_params
from components.contracts.naming import UnknownNameError
from components.data.schema import Member, PromptGroup
from components.evaluation.inputs import check_checkpoint, select_eval_groups
from components.evaluation.run import EvaluationInputError, evaluate_models
from components.generation.engines import EngineChoice, open_engine
from components.generation.sampling import SamplingConfig
from components.generation.transformers_engine import TransformersGenerationEngine, score_completions
from components.plugins import check_registered_names
from tests.conftest import ROOT
from tests.grpo_data import consistency_groups


def group(gid: str, task: str = "consistency", split: str = "heldout", members: int = 2, **kw) -> PromptGroup:
    return PromptGroup(
        group_id=gid, domain="job", task=task, split=split,
        members=[Member(variant_id=f"v{i}", text=f"Prompt {i} of {gid}?") for i in range(members)], **kw,
    )  # fmt: skip


def tiny_checkpoint(tmp_path_factory, tiny_model_dir, b_std: float):
    """A real groupwise checkpoint of the tiny model: LoRA with B ~ N(0, b_std²) (0: all zero), state naming the base.

    A keeps peft's random (non-zero) initialisation, so B alone decides whether the adapter acts.
    """
    from components.grpo.checkpoint import save_checkpoint
    from components.models.lora import attach_lora
    from components.models.provision import load_base_model, read_provenance

    model, _ = load_base_model(tiny_model_dir)
    model = attach_lora(model, LoraConfig(r=4, lora_alpha=8))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name and b_std:
                param.normal_(0.0, b_std)
            elif "lora_B" in name:
                param.zero_()
    provenance = read_provenance(tiny_model_dir)
    out = tmp_path_factory.mktemp("ckpt") / "latest"
    save_checkpoint(out, model, {"base_model_sha256": provenance.weights_sha256, "base_model_source": "tiny"}, [])
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_model_dir):
    return tiny_checkpoint(tmp_path_factory, tiny_model_dir, 0.5)


@pytest.fixture(scope="module")
def identity_checkpoint(tmp_path_factory, tiny_model_dir):
    """LoRA whose B matrices are all zero: B·A·x = 0, so the tuned model is the base model."""
    return tiny_checkpoint(tmp_path_factory, tiny_model_dir, 0.0)


# --- evaluation set -------------------------------------------------------------------------------


def test_empty_evaluation_set_is_named():
    params = Params()
    with pytest.raises(
        EvaluationInputError, match=r"empty evaluation set: no consistency groups in split 'heldout' among 1 groups \(0 in it\)"
    ):
        select_eval_groups([group("g0", split="train")], params)


def test_the_train_split_judges_train_groups_only_and_the_default_held_out_ones_only():
    def task(gid: str, split: str) -> PromptGroup:
        return group(gid, task="diversity", split=split, members=1, valid_answers=["red"]).model_copy(update={"domain": gid})

    groups = [group("h0"), group("t0", split="train"), group("t1", split="train"), task("colors", "heldout"), task("shapes", "train")]
    consistency, diversity = select_eval_groups(groups, Params())
    assert [g.group_id for g in consistency] == ["h0"] and [g.group_id for g in diversity] == ["colors"]
    consistency, diversity = select_eval_groups(groups, Params(eval=EvalConfig(split="train")))
    assert [g.group_id for g in consistency] == ["t0", "t1"] and [g.group_id for g in diversity] == ["shapes"]


def test_invalid_groups_in_the_evaluation_set_are_named():
    params = Params()
    with pytest.raises(EvaluationInputError, match=r"group 'solo': a consistency group needs at least 2 variants"):
        select_eval_groups([group("solo", members=1)], params)
    no_valid = group("colors", task="diversity", members=1)
    with pytest.raises(EvaluationInputError, match=r"group 'colors': diversity task without valid_answers"):
        select_eval_groups([group("g0"), no_valid], params)
    bad_normalizer = group("colors", task="diversity", members=1, valid_answers=["red"], answer_normalizer="nope")
    with pytest.raises(EvaluationInputError, match=r"group 'colors'.*nope"):
        select_eval_groups([group("g0"), bad_normalizer], params)


def test_an_eval_gap_axis_a_group_lacks_is_named_before_sampling():
    params = Params(eval=EvalConfig(gap_axis="age"))
    with pytest.raises(EvaluationInputError, match=r"group 'g0': eval.gap_axis 'age' is not one of its variant_axes \['gender'\]"):
        select_eval_groups([group("g0", variant_axes={"gender": ["woman", "man"]})], params)


# --- checkpoint -----------------------------------------------------------------------------------


def test_missing_and_incomplete_checkpoints_are_named(tmp_path, tiny_model_dir, checkpoint):
    with pytest.raises(EvaluationInputError, match=r"missing checkpoint .*groupwise train"):
        check_checkpoint(tmp_path / "nope", tiny_model_dir)
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    (broken / "adapter" / "adapter_model.safetensors").unlink()
    with pytest.raises(EvaluationInputError, match=r"incomplete checkpoint \(no adapter/adapter_model.safetensors\)"):
        check_checkpoint(broken, tiny_model_dir)
    no_state = tmp_path / "no_state"
    shutil.copytree(checkpoint, no_state)
    (no_state / "train_state.json").unlink()
    with pytest.raises(EvaluationInputError, match=r"unreadable train_state.json"):
        check_checkpoint(no_state, tiny_model_dir)
    with pytest.raises(EvaluationInputError, match="not a provisioned base model"):
        check_checkpoint(checkpoint, tmp_path)
    assert check_checkpoint(checkpoint, tiny_model_dir) == checkpoint / "adapter"


def test_adapter_for_another_base_model_is_refused(tmp_path, tiny_model_dir, checkpoint):
    other = tmp_path / "other"
    shutil.copytree(checkpoint, other)
    state = json.loads((other / "train_state.json").read_text())
    state.update(base_model_sha256="0" * 64, base_model_source="gguf")
    (other / "train_state.json").write_text(json.dumps(state))
    with pytest.raises(EvaluationInputError, match=r"trained on another base model \(gguf, weights sha256 0000"):
        check_checkpoint(other, tiny_model_dir)


def test_base_weights_changed_since_provisioning_are_refused(tmp_path, tiny_model_dir, checkpoint):
    """The adapter's recorded base hash equals the folder's recorded one: the file itself is hashed."""
    base = tmp_path / "base"
    shutil.copytree(tiny_model_dir, base)
    weights = base / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 0x01]))
    with pytest.raises(EvaluationInputError, match=r"base/model.safetensors: SHA-256 \w+, not the \w+ recorded in groupwise_model.json"):
        check_checkpoint(checkpoint, base)


# --- params ---------------------------------------------------------------------------------------


def test_eval_params_default_to_vllm_without_fallback(tmp_path):
    params = load_params(ROOT / "params.yaml")
    assert params.eval.engine == "vllm" and params.eval.allow_fallback is False
    assert load_params(ROOT / "params.yaml", "tiny").eval.engine == "transformers"  # declared, not a fallback
    bad = tmp_path / "params.yaml"
    bad.write_text("eval: {engine: tgi}\n")
    with pytest.raises(UnknownNameError, match=r"eval\.engine.*'tgi'"):  # a registry name, a user error, checked before any work
        check_registered_names(load_params(bad))
    bad.write_text("eval: {samples_per_prompt: 1}\n")
    with pytest.raises(ParamsError, match=r"eval\.samples_per_prompt"):
        load_params(bad)


def test_unknown_engine_name_lists_the_known_ones(tiny_model_dir):
    with pytest.raises(ValueError, match=r"unknown engine 'tgi'; known: \['transformers', 'vllm'\]"):
        open_engine("tgi", tiny_model_dir, EvalConfig(), "float32", 0)


def test_engine_choice_records_a_fallback():
    assert EngineChoice("vllm", "vllm").to_dict() == {"requested": "vllm", "used": "vllm", "fallback": False, "fallback_reason": ""}
    fell = EngineChoice("vllm", "transformers", "boom")
    assert fell.fell_back and fell.to_dict()["fallback_reason"] == "boom"


# --- transformers engine (tiny model) -------------------------------------------------------------


def test_transformers_engine_samples_logprobs_and_adapter(tiny_model_dir, checkpoint, capfd):
    engine, choice = open_engine("transformers", tiny_model_dir, EvalConfig(engine="transformers", batch_size=8), "float32", 0)
    assert choice == EngineChoice("transformers", "transformers")
    cfg = SamplingConfig(n=3, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=5)
    prompts = ["What should I invest in?", "Name a colour."]
    capfd.readouterr()
    base = engine.generate(prompts, cfg)
    assert [len(row) for row in base] == [3, 3]
    assert "generate:   0%|" in capfd.readouterr().err  # the evaluation's engine draws its progress bar
    eos = engine._tokenizer.eos_token_id
    for row in base:
        for s in row:
            assert len(s.logprobs) == len(s.completion_ids) <= 6 and eos not in s.completion_ids
            assert all(lp <= 1e-6 for lp in s.logprobs)
    # the returned log-probs are the model's: rescoring the same tokens gives the same numbers
    flat = [s for row in base for s in row if s.completion_ids]
    rescored = score_completions(engine._model, flat, engine._tokenizer.pad_token_id, 1.0)
    assert [pytest.approx(x, abs=1e-4) for x in rescored] == [list(s.logprobs) for s in flat]
    texts = lambda out: [[s.text for s in row] for row in out]  # noqa: E731
    assert texts(engine.generate(prompts, cfg)) == texts(base)  # seeded
    tuned = engine.generate(prompts, cfg, checkpoint / "adapter")
    assert [[s.completion_ids for s in row] for row in tuned] != [[s.completion_ids for s in row] for row in base]
    assert texts(engine.generate(prompts, cfg)) == texts(base)  # adapter disabled for the base model again
    engine.close()
    quiet = TransformersGenerationEngine(tiny_model_dir, 8, "float32")  # not through the registry: no bar
    capfd.readouterr()
    assert texts(quiet.generate(prompts, cfg)) == texts(base)  # the bar changes no sample
    assert "generate" not in capfd.readouterr().err


def test_base_and_tuned_get_the_same_prompts_and_seeds(
    tiny_model_dir, identity_checkpoint, benchmarks_dir, monkeypatch, stand_in_embeddings
):
    """With a zero adapter (tuned = base) evaluate_models must give the tuned model the base's texts,
    sample by sample: any difference would come from different prompts, order or seeds."""
    import numpy as np

    calls = []
    real_generate = TransformersGenerationEngine.generate

    def recording_generate(self, prompts, cfg, adapter=None):
        calls.append((list(prompts), cfg, adapter))
        return real_generate(self, prompts, cfg, adapter)

    monkeypatch.setattr(TransformersGenerationEngine, "generate", recording_generate)
    params = Params()
    fairness = FairnessConfig(max_questions=1, ages=[60], races=["white"], bbq_items=4)
    small = {"engine": "transformers", "dtype": "float32", "samples_per_prompt": 2, "max_new_tokens": 5, "fairness": fairness}
    paths = {"benchmarks": benchmarks_dir, "base_outputs": None}  # every generate call recorded: nothing kept
    params = params.model_copy(update={"eval": params.eval.model_copy(update=small), "paths": params.paths.model_copy(update=paths)})
    groups = [g.model_copy(update={"split": "heldout"}) for g in consistency_groups(2)]
    groups.append(group("colors", task="diversity", members=1, valid_answers=["red", "blue"]))
    frames = evaluate_models(params, groups, tiny_model_dir, identity_checkpoint)

    (base_prompts, base_cfg, base_adapter), (tuned_prompts, tuned_cfg, tuned_adapter) = calls
    assert base_prompts == tuned_prompts and base_cfg == tuned_cfg and base_cfg.seed == params.seed
    assert base_adapter is None and tuned_adapter == identity_checkpoint / "adapter"

    samples = frames.samples
    key = ["group_id", "variant_id", "sample"]
    base = samples[samples["model"] == "base"].set_index(key).sort_index()
    tuned = samples[samples["model"] == "tuned"].set_index(key).sort_index()
    assert len(base) == len(tuned) == (2 * 2 + 1) * 2
    assert base.index.equals(tuned.index)
    assert base["text"].tolist() == tuned["text"].tolist()
    assert base["n_tokens"].tolist() == tuned["n_tokens"].tolist()
    assert base["n_tokens"].sum() > 0  # something was generated
    assert (frames.consistency["base_gap"] == frames.consistency["tuned_gap"]).all()
    # the decision benchmark: one held-out question x 3 genders, the same log-odds through the zero adapter
    (decisions,) = frames.decisions
    assert len(decisions.table) == 3 and set(decisions.table["gender"]) == {"female", "male", "non-binary"}
    assert np.allclose(decisions.table["base_logit"], decisions.table["tuned_logit"], atol=1e-5)
    # BBQ on the same engine: one set of four items, the same letter log-probabilities through the zero adapter
    assert frames.bbq.logprobs["base"].shape == (4, 3) and set(frames.bbq.items["condition"]) == {"ambig", "disambig"}
    assert np.allclose(frames.bbq.logprobs["base"], frames.bbq.logprobs["tuned"], atol=1e-5)
    assert frames.generation["bbq_base"]["prompts"] == frames.generation["bbq_tuned"]["prompts"] == 4


def test_saved_samples_score_to_the_same_tables(tiny_model_dir, checkpoint, tmp_path, stand_in_embeddings):
    """score_samples on samples.csv as written and read back (an evaluation re-scored without
    generating again) gives the per-group tables of the evaluation itself."""
    import pandas as pd

    from components.evaluation.run import score_samples

    params = Params()
    small = {
        "engine": "transformers",
        "dtype": "float32",
        "samples_per_prompt": 3,
        "max_new_tokens": 8,
        "fairness": FairnessConfig(benchmarks=[]),
    }
    params = params.model_copy(
        update={"eval": params.eval.model_copy(update=small), "paths": params.paths.model_copy(update={"base_outputs": None})}
    )
    groups = [g.model_copy(update={"split": "heldout"}) for g in consistency_groups(3)]
    groups.append(group("colors", task="diversity", members=1, valid_answers=["red", "blue"]))
    frames = evaluate_models(params, groups, tiny_model_dir, checkpoint)
    frames.samples.to_csv(tmp_path / "samples.csv", index=False)
    consistency, diversity = score_samples(params, groups, pd.read_csv(tmp_path / "samples.csv"))
    pd.testing.assert_frame_equal(consistency, frames.consistency)
    pd.testing.assert_frame_equal(diversity, frames.diversity)
    assert {"base_compliance", "tuned_sentences", "base_length_controlled_gap"} <= set(consistency.columns)
    with pytest.raises(EvaluationInputError, match="no tuned samples of group"):
        score_samples(params, groups, frames.samples[frames.samples["model"] == "base"])


def test_a_calibration_on_train_groups_says_so_and_never_registers(tiny_model_dir, checkpoint, stand_in_embeddings):
    """eval.split: train scores the train groups; metrics.json records the split and notes it first,
    and the `heldout` gate refuses the model."""
    from components.evaluation.run import evaluation_summary
    from components.release.gate import evaluate_gates

    small = {"engine": "transformers", "dtype": "float32", "samples_per_prompt": 2, "max_new_tokens": 6,
             "fairness": FairnessConfig(benchmarks=[]), "split": "train"}  # fmt: skip
    params = Params()
    params = params.model_copy(
        update={"eval": params.eval.model_copy(update=small), "paths": params.paths.model_copy(update={"base_outputs": None})}
    )
    groups = [g.model_copy(update={"split": "train"}) for g in consistency_groups(2)]
    groups.append(group("held", split="heldout"))
    frames = evaluate_models(params, groups, tiny_model_dir, checkpoint)
    assert "held" not in set(frames.consistency["group_id"])
    summary = evaluation_summary(frames, params, None)
    assert summary.split == "train" and summary.notes[0].startswith("CALIBRATION: judged on the train split's groups")
    verdict = next(r for r in evaluate_gates(summary, params.gate).results if r.name == "heldout")
    assert not verdict.passed and "split 'train' (eval.split)" in verdict.reason


def test_transformers_engine_reports_an_unloadable_model(tmp_path):
    from components.generation.engines import EngineStartError

    with pytest.raises(EngineStartError, match="transformers engine could not load"):
        TransformersGenerationEngine(tmp_path, batch_size=4)


def test_generation_beyond_the_models_context_is_refused_before_sampling(tiny_model_dir):
    from components.generation.context import ContextLengthError
    from components.generation.sampling import SamplingConfig

    engine = TransformersGenerationEngine(tiny_model_dir, batch_size=4)
    with pytest.raises(
        ContextLengthError, match=r"eval\.max_new_tokens \(100000000\) \+ the longest prompt \(\d+ tokens\) exceed the model's context"
    ):
        engine.generate(["Hello"], SamplingConfig(n=2, max_new_tokens=100_000_000, temperature=1.0, top_p=1.0, seed=0))
