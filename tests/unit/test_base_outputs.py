"""Kept base-model outputs: the base side of an evaluation is computed once per base, prompts,
sampling, engine and machine, read back exactly, and computed again when anything else changed."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

import components.embeddings as embeddings
from components.config import FairnessConfig, Params
from components.evaluation.base_outputs import BaseOutputs, engine_identity
from components.evaluation.run import evaluate_models
from components.generation.sampling import Sample, SamplingConfig
from components.generation.transformers_engine import TransformersGenerationEngine
from tests.grpo_data import consistency_groups

CFG = SamplingConfig(n=2, max_new_tokens=4, temperature=0.7, top_p=1.0, seed=7)


def made(seed: int = 0) -> list[list[Sample]]:
    rng = np.random.default_rng(seed)
    return [[Sample(i, (1, 2), (3, 4, 5), tuple(float(x) for x in rng.normal(size=3)), f"answer {i}.{j} ünï", j == 1) for j in range(2)]
            for i in range(3)]  # fmt: skip


class Counter:
    def __init__(self, make):
        self.calls, self.make = 0, make

    def __call__(self):
        self.calls += 1
        return self.make()


def store(root, machine: str = "CPU") -> BaseOutputs:
    identity = engine_identity("sha-of-weights", "transformers", "float32", {"batch_size": 8})
    return BaseOutputs(root, {**identity, "machine": machine})


def test_kept_samples_and_logits_are_read_back_exactly_and_computed_once(tmp_path):
    prompts = ["a", "b", "c"]
    make = Counter(made)
    first, kept = store(tmp_path).samples(prompts, CFG, make)
    again, kept_again = store(tmp_path).samples(prompts, CFG, make)
    assert (kept, kept_again, make.calls) == (False, True, 1)
    assert again == first  # every field, floats to the last bit, tuples as tuples
    logits = Counter(lambda: np.array([0.1, -2.5, 1e-17]))
    inputs = {"benchmark": "discrim_eval", "turns": prompts}
    x, _ = store(tmp_path).logits(inputs, 3, logits)
    y, reused = store(tmp_path).logits(inputs, 3, logits)
    assert reused and logits.calls == 1 and y.tolist() == x.tolist()
    vectors = Counter(lambda: np.arange(6, dtype=np.float32).reshape(3, 2) / 7)
    embedder = {"batch_size": 32, "dtype": "float32"}
    e, _ = store(tmp_path).embeddings(prompts, embedder, vectors)
    f, reused = store(tmp_path).embeddings(prompts, embedder, vectors)
    assert reused and vectors.calls == 1 and f.dtype == np.float32 and f.tobytes() == e.tobytes()
    assert not store(tmp_path).embeddings(prompts, {**embedder, "batch_size": 16}, vectors)[1]  # another embedder setting
    assert not store(tmp_path).embeddings(["a", "b", "d"], embedder, vectors)[1] and vectors.calls == 3  # other texts


def test_anything_else_changed_is_computed_again(tmp_path):
    make = Counter(made)
    store(tmp_path).samples(["a", "b", "c"], CFG, make)
    store(tmp_path).samples(["a", "b", "d"], CFG, make)  # other prompts
    store(tmp_path).samples(["a", "b", "c"], SamplingConfig(2, 4, 0.7, 1.0, seed=8), make)  # other seed
    store(tmp_path, machine="CPU, AVX512").samples(["a", "b", "c"], CFG, make)  # another machine
    other = BaseOutputs(tmp_path, engine_identity("other weights", "transformers", "float32", {"batch_size": 8}))
    other.samples(["a", "b", "c"], CFG, make)
    assert make.calls == 5 and len(list(tmp_path.glob("samples-*.json.gz"))) == 5


def test_an_unreadable_record_is_computed_again_and_nothing_is_kept_without_a_folder(tmp_path, caplog):
    make = Counter(made)
    store(tmp_path).samples(["a", "b", "c"], CFG, make)
    (record,) = tmp_path.glob("samples-*.json.gz")
    record.write_bytes(b"not gzip")  # a damaged record
    with caplog.at_level(logging.WARNING):
        out, kept = store(tmp_path).samples(["a", "b", "c"], CFG, make)
    assert not kept and make.calls == 2 and out == made() and "unreadable" in caplog.text
    assert store(tmp_path).samples(["a", "b", "c"], CFG, make)[1]  # rewritten whole
    nothing = BaseOutputs(None, {})
    assert not nothing.samples(["a"], CFG, make)[1] and not nothing.samples(["a"], CFG, make)[1] and make.calls == 4


def test_the_bases_embeddings_read_back_equal_computing_them_and_differ_from_one_shared_call_at_rounding_only(tmp_path):
    """The real sentence model: the base's texts embedded in a call of their own give the same rows
    bit for bit whether kept or computed again; the candidate's texts are embedded apart, and a text
    both models wrote takes the base's row. Against embedding everything in one call (batches of
    other texts), the rows differ at float rounding only."""
    from components.embeddings import embed
    from components.evaluation.run import embed_samples

    base = [
        "Yes.",
        "Save a little every month and keep an emergency fund.",
        "No",
        "Ask a financial adviser about index funds first.",
        "Maybe.",
    ]
    tuned = ["Yes.", "Index funds with low fees, held for years.", "It depends on your goals and on how soon you need the money."]
    samples = pd.DataFrame({"model": ["base"] * len(base) + ["tuned"] * len(tuned), "text": base + tuned})
    texts = list(dict.fromkeys(base + tuned))
    first, first_timing = embed_samples(samples, store(tmp_path), 3, "float32")
    again, again_timing = embed_samples(samples, store(tmp_path), 3, "float32")
    fresh, _ = embed_samples(samples, BaseOutputs(None, {}), 3, "float32")
    assert len(list(tmp_path.glob("embeddings-*.npy"))) == 1
    assert first_timing["embeddings_base"]["texts"] == 5 and first_timing["embeddings_base"]["seconds"] > 0
    assert again_timing["embeddings_base"] == {"texts": 5, "seconds": 0.0, "texts_per_s": 0.0, "reused": 1}
    assert again_timing["embeddings_tuned"]["texts"] == 2 and "reused" not in again_timing["embeddings_tuned"]  # "Yes." is the base's
    assert again(texts).tobytes() == first(texts).tobytes() == fresh(texts).tobytes()
    assert first(base).tobytes() == embed(base, batch_size=3, dtype="float32").tobytes()  # the base's own call
    one_call = embed(texts, batch_size=3, dtype="float32")
    np.testing.assert_allclose(first(texts), one_call, rtol=0, atol=1e-5)


def test_an_evaluation_reads_the_base_side_it_kept_and_it_equals_computing_it(
    tiny_model_dir, benchmarks_dir, tmp_path, tmp_path_factory, monkeypatch, stand_in_embeddings
):
    """Evaluated twice with kept outputs: the second samples the tuned model only and reads the base
    decisions back; both equal an evaluation that keeps nothing, sample by sample and logit by logit."""
    from tests.unit.test_eval_inputs import tiny_checkpoint

    calls = []
    real_generate = TransformersGenerationEngine.generate

    def recording_generate(self, prompts, cfg, adapter=None):
        calls.append(adapter)
        return real_generate(self, prompts, cfg, adapter)

    monkeypatch.setattr(TransformersGenerationEngine, "generate", recording_generate)
    stand_in, embedded = embeddings.embed, []
    monkeypatch.setattr(embeddings, "embed", lambda texts, **kw: embedded.append(list(texts)) or stand_in(texts, **kw))

    checkpoint = tiny_checkpoint(tmp_path_factory, tiny_model_dir, 0.5)
    small = {"engine": "transformers", "dtype": "float32", "samples_per_prompt": 2, "max_new_tokens": 5,
             "fairness": FairnessConfig(max_questions=1, ages=[60], races=["white"], bbq_items=4)}  # fmt: skip
    params = Params()

    def with_kept(root):
        paths = params.paths.model_copy(update={"benchmarks": benchmarks_dir, "base_outputs": root})
        return params.model_copy(update={"eval": params.eval.model_copy(update=small), "paths": paths})

    groups = [g.model_copy(update={"split": "heldout"}) for g in consistency_groups(2)]
    first = evaluate_models(with_kept(tmp_path / "kept"), groups, tiny_model_dir, checkpoint)
    first_embedded, embedded[:] = embedded[:], []
    second = evaluate_models(with_kept(tmp_path / "kept"), groups, tiny_model_dir, checkpoint)
    second_embedded = embedded[:]
    fresh = evaluate_models(with_kept(None), groups, tiny_model_dir, checkpoint)
    adapter = checkpoint / "adapter"
    assert calls == [None, adapter, adapter, None, adapter]  # the second evaluation sampled the tuned model only
    # the base's texts are embedded in a call of their own, kept: the second evaluation embeds the candidate's only
    base_texts = list(dict.fromkeys(first.samples.loc[first.samples["model"] == "base", "text"]))
    assert first_embedded[0] == base_texts and second_embedded == first_embedded[1:] and base_texts not in second_embedded
    assert len(list((tmp_path / "kept").glob("embeddings-*.npy"))) == 1
    assert "reused" not in first.generation["base"] and second.generation["base"]["reused"] == 1
    assert second.generation["discrim_eval_base"]["reused"] == 1 and second.generation["discrim_eval_base"]["seconds"] == 0.0
    assert "reused" not in second.generation["discrim_eval_tuned"] and second.generation["discrim_eval_tuned"]["seconds"] > 0
    assert second.generation["bbq_base"]["reused"] == 1 and "reused" not in second.generation["bbq_tuned"]
    # each benchmark's prefill is a phase of the evaluation's time, the candidate's alone where the base's was kept
    assert second.phase_seconds["discrim_eval prefill"] == second.generation["discrim_eval_tuned"]["seconds"] > 0
    assert first.phase_seconds["bbq prefill"] == first.generation["bbq_base"]["seconds"] + first.generation["bbq_tuned"]["seconds"]
    for other in (second, fresh):
        pd.testing.assert_frame_equal(other.samples, first.samples)
        pd.testing.assert_frame_equal(other.decisions[0].table, first.decisions[0].table)
        pd.testing.assert_frame_equal(other.bbq.items, first.bbq.items)
        assert all((other.bbq.logprobs[m] == first.bbq.logprobs[m]).all() for m in ("base", "tuned"))
        pd.testing.assert_frame_equal(other.consistency, first.consistency)


def test_arms_of_other_training_seeds_share_the_base_side_when_the_evaluation_seed_is_fixed(
    tiny_model_dir, tmp_path, tmp_path_factory, monkeypatch, stand_in_embeddings
):
    """`eval.seed` fixed: two arms that differ only in the run's seed sample the base model once between
    them, and the second arm's base samples are the first's; without it, each arm samples its own base."""
    from tests.unit.test_eval_inputs import tiny_checkpoint

    calls = []
    real_generate = TransformersGenerationEngine.generate

    def recording_generate(self, prompts, cfg, adapter=None):
        calls.append((adapter, cfg.seed))
        return real_generate(self, prompts, cfg, adapter)

    monkeypatch.setattr(TransformersGenerationEngine, "generate", recording_generate)
    checkpoint = tiny_checkpoint(tmp_path_factory, tiny_model_dir, 0.5)
    groups = [g.model_copy(update={"split": "heldout"}) for g in consistency_groups(2)]

    def arm(seed: int, eval_seed: int | None, kept):
        params = Params(seed=seed)
        small = {"engine": "transformers", "dtype": "float32", "samples_per_prompt": 2, "max_new_tokens": 5,
                 "seed": eval_seed, "fairness": FairnessConfig(benchmarks=[])}  # fmt: skip
        paths = params.paths.model_copy(update={"base_outputs": kept})
        params = params.model_copy(update={"eval": params.eval.model_copy(update=small), "paths": paths})
        return params, evaluate_models(params, groups, tiny_model_dir, checkpoint)

    adapter = checkpoint / "adapter"
    first_params, first = arm(2001, 77, tmp_path / "fixed")
    second_params, second = arm(2002, 77, tmp_path / "fixed")
    assert first_params.eval_seed == second_params.eval_seed == 77
    assert calls == [(None, 77), (adapter, 77), (adapter, 77)]  # one base pass for both arms
    assert second.generation["base"]["reused"] == 1
    base = lambda frames: frames.samples[frames.samples["model"] == "base"].reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(base(second), base(first))

    calls.clear()
    own = [arm(seed, None, tmp_path / "own")[0].eval_seed for seed in (2001, 2002)]
    assert own == [2001, 2002] and calls == [(None, 2001), (adapter, 2001), (None, 2002), (adapter, 2002)]
