"""Batch evaluation of base vs tuned on the held-out groups, same prompts and same seeds.

The whole held-out set goes to the generation engine in one call per model (base: no adapter;
tuned: the checkpoint's LoRA adapter), with identical chat-templated prompts and sampling seeds,
so per-group differences come from the adapter alone. All samples are embedded once
(all-MiniLM-L6-v2) for the semantic metrics. Returns one row per group (see `records`) and one per
sample.

The evaluation's entry point is `prepare_evaluation` (checks, and the hashes of what will be read)
then `components.reporting.evaluation_run.evaluate_and_report` (sample and score here, summarise
into the `EvaluationSummary` that is metrics.json, then write the report folder).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from components.code_version import code_version
from components.config import Params
from components.contracts.checkpoint import (
    ADAPTER_DIR,
    CheckpointLayout,
    recover_checkpoint,
)
from components.contracts.summary import BbqSummary, BenchmarkSummary, EvaluatedFiles, EvaluationSummary
from components.data.normalizers import DEFAULT_NORMALIZER, get_normalizer
from components.data.schema import PromptGroup
from components.evaluation.base_outputs import BaseOutputs, engine_identity
from components.evaluation.bbq import BbqAnswers, run_bbq, summarize_bbq
from components.evaluation.fairness import EFFECT_COLUMNS, run_decisions, summarize_decisions
from components.evaluation.inputs import check_checkpoint, select_eval_groups
from components.evaluation.instruction_following import instruction_rows, summarize_instructions
from components.evaluation.length_control import fit_length_model
from components.evaluation.records import (
    EvaluationInputError,
    Semantics,
    consistency_record,
    diversity_record,
)
from components.evaluation.statistics import Comparison
from components.evaluation.summary import SummarySettings, summarize
from components.fairness_benchmarks import BENCHMARKS
from components.generation.engines import (
    EngineChoice,
    GenerationEngine,
    Sample,
    open_engine,
    open_engines,
)
from components.generation.sampling import SamplingConfig
from components.models.provision import verified_base_model
from components.rewards.entropy import response_entropy, words


@dataclass
class EvaluationFrames:
    consistency: pd.DataFrame
    diversity: pd.DataFrame
    samples: pd.DataFrame  # one row per generated sample: group, variant, model, text, tokens, log-prob
    engine: EngineChoice = field(default_factory=lambda: EngineChoice("", ""))
    generation: dict = field(default_factory=dict)  # sequences, tokens, seconds, tokens/s per model
    base_outputs: list = field(default_factory=list, repr=False)  # raw base samples (reusable: `base_outputs=`)
    decisions: list = field(default_factory=list)  # `fairness.Decisions` of each decision benchmark (eval.fairness)
    bbq: BbqAnswers | None = None  # BBQ's answers when eval.fairness.benchmarks names it
    phase_seconds: dict[str, float] = field(default_factory=dict)  # engine start, "<benchmark> prefill", embeddings and scoring
    instructions: pd.DataFrame | None = None  # per instructed group: family, compliance strict/loose (`instruction_following`)
    uninstructed: pd.DataFrame | None = None  # per group whose prompts ask for nothing: words base vs tuned


class EmbeddingCache:
    """Every distinct text's embedding (`embed_samples`), served as rows by text."""

    def __init__(self, texts: list[str], vectors: np.ndarray):
        self._index, self._vectors = {text: i for i, text in enumerate(texts)}, vectors

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self._vectors[[self._index[t] for t in texts]]


def embed_samples(samples: pd.DataFrame, kept: BaseOutputs, batch_size: int, dtype: str) -> tuple[EmbeddingCache, dict]:
    """Every distinct text of `samples` (columns model, text) embedded, and each call timed: the base
    model's texts in one call (kept between evaluations with its samples, `BaseOutputs.embeddings`),
    the candidate's that the base did not write in a second. Two calls, not one, because the texts
    batched with a text shape its embedding's float rounding: the base's own call gives the same rows
    whether kept or computed. Timing: {"embeddings_base" | "embeddings_tuned": {texts, seconds,
    texts_per_s[, reused: 1]}}."""
    from components.embeddings import embed, embedder_identity

    base = list(dict.fromkeys(samples.loc[samples["model"] == "base", "text"]))
    known = set(base)
    candidate = [text for text in dict.fromkeys(samples.loc[samples["model"] != "base", "text"]) if text not in known]
    started = time.perf_counter()
    settings = embedder_identity(batch_size, dtype)
    base_vectors, reused = kept.embeddings(base, settings, lambda: embed(base, batch_size=batch_size, dtype=dtype))
    base_seconds = 0.0 if reused else time.perf_counter() - started
    started = time.perf_counter()
    candidate_vectors = embed(candidate, batch_size=batch_size, dtype=dtype)
    timing = {
        "embeddings_base": _embedding_rate(len(base), base_seconds) | ({"reused": 1} if reused else {}),
        "embeddings_tuned": _embedding_rate(len(candidate), time.perf_counter() - started),
    }
    return EmbeddingCache(base + candidate, np.vstack([base_vectors, candidate_vectors])), timing


def _embedding_rate(texts: int, seconds: float) -> dict:
    return {"texts": texts, "seconds": seconds, "texts_per_s": texts / seconds if seconds else 0.0}


def sampling_config(params: Params) -> SamplingConfig:
    cfg = params.eval
    return SamplingConfig(
        n=cfg.samples_per_prompt, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
        top_p=cfg.top_p, seed=params.eval_seed,
    )  # fmt: skip


def candidate_sampling(params: Params) -> SamplingConfig:
    """The candidate's sampling: eval's, with `eval.candidate.temperature` and seed offset applied."""
    candidate = params.eval.candidate
    temperature = params.eval.temperature if candidate.temperature is None else candidate.temperature
    return replace(sampling_config(params), temperature=temperature, seed=params.eval_seed + candidate.seed_offset)


def _timed(engine: GenerationEngine, prompts: list[str], cfg: SamplingConfig, adapter: Path | None) -> tuple[list[list[Sample]], dict]:
    """Generate and time; temperature 0 is greedy: one sample per prompt, repeated n times."""
    started = time.perf_counter()
    if cfg.temperature == 0:
        greedy = engine.generate(prompts, replace(cfg, n=1), adapter)
        out = [row * cfg.n for row in greedy]
    else:
        out = engine.generate(prompts, cfg, adapter)
    seconds = time.perf_counter() - started
    tokens = sum(len(s.completion_ids) for row in out for s in row)
    stats = {"sequences": len(prompts) * cfg.n, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds if seconds else 0.0}
    return out, stats


def base_weights_sha256(params: Params, base_model_dir: Path) -> str | None:
    """The verified base weights' SHA-256 that keys kept base outputs (hashed once an evaluation); None
    when `paths.base_outputs` keeps none."""
    return None if params.paths.base_outputs is None else verified_base_model(base_model_dir).weights_sha256


def cached_base_outputs(params: Params, weights_sha256: str | None, engine: str, dtype: str) -> BaseOutputs:
    """The base model's kept outputs (`paths.base_outputs`) for this base, engine, dtype and machine."""
    if params.paths.base_outputs is None or weights_sha256 is None:
        return BaseOutputs(None, {})
    settings = {"batch_size": params.eval.batch_size, "vllm": params.eval.vllm.model_dump(mode="json") if engine == "vllm" else None}
    return BaseOutputs(params.paths.base_outputs, engine_identity(weights_sha256, engine, dtype, settings))


def score_fairness(engine: GenerationEngine, params: Params, adapter: Path | None, kept: BaseOutputs) -> tuple[list, BbqAnswers | None]:
    """The fairness benchmarks of `eval.fairness.benchmarks` on `engine`: the decision benchmarks'
    `fairness.Decisions`, and BBQ's answers (None when not named)."""
    cfg, data_dir = params.eval.fairness, params.paths.benchmarks
    return run_decisions(engine, cfg, data_dir, adapter, kept), run_bbq(engine, cfg, data_dir, adapter, kept)


def score_fairness_on_own_engine(
    params: Params,
    base_model_dir: Path,
    adapter: Path | None,
    weights_sha256: str | None = None,
    opened: tuple[GenerationEngine, EngineChoice] | None = None,
) -> tuple[list, BbqAnswers | None]:
    """`score_fairness` on an engine of its own in `eval.fairness.dtype` (the engine kind of
    `eval.engine`, its fallback rule included; `opened`: one started already, closed here too);
    `weights_sha256` keys the base's kept outputs."""
    engine, choice = opened or open_engine(params.eval.engine, base_model_dir, params.eval, params.eval.fairness.dtype, params.eval_seed)
    try:
        return score_fairness(engine, params, adapter, cached_base_outputs(params, weights_sha256, choice.used, params.eval.fairness.dtype))
    finally:
        engine.close()


def evaluate_models(
    params: Params,
    groups: list[PromptGroup],
    base_model_dir: Path,
    checkpoint_dir: Path | None,
    engine: GenerationEngine | None = None,
    base_outputs: list[list[Sample]] | None = None,
    decide: bool = True,
) -> EvaluationFrames:
    """Sample base and the candidate ("tuned") on the held-out set, score every group.

    The candidate is the checkpoint's adapter (`eval.candidate.source: adapter`) or the base model
    decoded with `eval.candidate` settings (`source: base`, no checkpoint needed). `engine`: reuse
    a started one; `base_outputs`: the base samples of an earlier call with the same groups and
    sampling (`EvaluationFrames.base_outputs`), not generated again. The decision benchmarks
    (`eval.fairness`) are read after the sampling, on the same engine when `eval.fairness.dtype` is
    `eval.dtype`, else on one of their own; `decide=False` skips them (a learning curve's points).
    """
    consistency, diversity = select_eval_groups(groups, params)
    use_adapter = params.eval.candidate.source == "adapter"
    if use_adapter and checkpoint_dir is None:
        raise EvaluationInputError("eval.candidate.source is 'adapter' but no checkpoint was given")
    adapter = check_checkpoint(checkpoint_dir, base_model_dir) if use_adapter else None
    selected = consistency + diversity
    prompts = [m.text for g in selected for m in g.members]
    sampling = sampling_config(params)
    tuned_sampling = candidate_sampling(params)
    weights_sha256 = base_weights_sha256(params, base_model_dir)  # before an engine starts: a changed base fails first
    decide = decide and bool(params.eval.fairness.benchmarks)
    own_decisions = decide and params.eval.fairness.dtype != params.eval.dtype  # read on an engine of their own
    decision_engine = None
    started = time.perf_counter()
    if engine is None:  # the decisions' engine starts beside the sampling engine, and waits
        dtypes = [params.eval.dtype, params.eval.fairness.dtype] if own_decisions else [params.eval.dtype]
        (engine, choice), *others = open_engines(params.eval.engine, base_model_dir, params.eval, dtypes, params.eval_seed)
        decision_engine, owned = (others[0] if others else None), True
    else:
        choice, owned = EngineChoice(engine.name, engine.name), False
    engine_start = time.perf_counter() - started
    reused = {"sequences": 0, "tokens": 0, "seconds": 0.0, "tokens_per_s": 0.0, "reused": 1}
    try:
        kept = cached_base_outputs(params, weights_sha256, choice.used, params.eval.dtype)
        if base_outputs is not None:
            if len(base_outputs) != len(prompts) or any(len(row) != sampling.n for row in base_outputs):
                raise EvaluationInputError("base_outputs do not match this evaluation's prompts and samples_per_prompt")
            base_out, base_stats = base_outputs, reused
        else:
            timed: dict = {}

            def sample_base() -> list[list[Sample]]:
                out, timed["stats"] = _timed(engine, prompts, sampling, None)
                return out

            base_out, was_kept = kept.samples(prompts, sampling, sample_base)
            base_stats = reused if was_kept else timed["stats"]
        tuned_out, tuned_stats = _timed(engine, prompts, tuned_sampling, adapter)
        decisions, bbq = score_fairness(engine, params, adapter, kept) if decide and not own_decisions else ([], None)
    except BaseException:
        if decision_engine is not None:
            decision_engine[0].close()
        raise
    finally:
        if owned:
            engine.close()
    if own_decisions:  # after the sampling engine is closed
        decisions, bbq = score_fairness_on_own_engine(params, base_model_dir, adapter, weights_sha256, decision_engine)

    samples = samples_frame(selected, base_out, tuned_out)
    started = time.perf_counter()
    embeddings, embedding_stats = embed_samples(samples, kept, params.eval.embedding_batch_size, params.eval.embedding_dtype)
    rows_c, rows_d = score_samples(params, selected, samples, embeddings)
    told, free = instruction_rows(selected, samples, family_splits(params, selected))
    phases = {"engine start": engine_start, "embeddings and scoring": time.perf_counter() - started}
    generation = {"base": base_stats, "tuned": tuned_stats} | embedding_stats
    timed = [(d.benchmark.name, len(d.table), d.seconds, d.reused) for d in decisions]
    if bbq is not None:
        timed.append((bbq.benchmark.name, len(bbq.items), bbq.seconds, bbq.reused))
    for name, n, seconds, kept_models in timed:
        phases[f"{name} prefill"] = sum(seconds.values())
        generation |= {f"{name}_{model}": {"prompts": n, "seconds": took, "prompts_per_s": n / took if took else 0.0}
                       | ({"reused": 1} if model in kept_models else {}) for model, took in seconds.items()}  # fmt: skip
    return EvaluationFrames(rows_c, rows_d, samples, choice, generation, base_out, decisions, bbq, phases, told, free)


def family_splits(params: Params, groups: list[PromptGroup]) -> dict[str, str]:
    """family -> train | heldout from `paths.instruction_families`, read only when a group was given
    a family's instruction."""
    if not any(g.instruction is not None for g in groups):
        return {}
    from components.instructions.families import load_families

    families = load_families(params.paths.instruction_families)
    return {f.id: f.split for f in families.families}


SAMPLE_COLUMNS = ["group_id", "task", "variant_id", "model", "sample", "text", "n_tokens", "mean_logprob", "truncated"]


def samples_frame(groups: list[PromptGroup], base_out: list[list[Sample]], tuned_out: list[list[Sample]]) -> pd.DataFrame:
    """One row per sample (SAMPLE_COLUMNS; samples.csv): the outputs of every member of `groups` in
    order, base then tuned."""
    rows, cursor = [], 0
    for group in groups:
        for member in group.members:
            for model, outs in (("base", base_out[cursor]), ("tuned", tuned_out[cursor])):
                rows += [
                    {"group_id": group.group_id, "task": group.task, "variant_id": member.variant_id, "model": model, "sample": j,
                     "text": s.text, "n_tokens": len(s.completion_ids), "mean_logprob": s.mean_logprob, "truncated": s.truncated}
                    for j, s in enumerate(outs)
                ]  # fmt: skip
            cursor += 1
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


def score_samples(
    params: Params, groups: list[PromptGroup], samples: pd.DataFrame, embeddings: EmbeddingCache | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-group tables (consistency, diversity) from the samples of `groups` (`samples_frame`,
    or a saved samples.csv: an evaluation re-scored without generating again). All texts are
    embedded once (`embed_samples`, unless `embeddings` holds them already); the length-controlled
    gap's fit (`length_control`) spans every consistency answer of both models."""
    samples = samples.assign(text=samples["text"].fillna("").astype(str))
    if embeddings is None:
        embeddings = embed_samples(samples, BaseOutputs(None, {}), params.eval.embedding_batch_size, params.eval.embedding_dtype)[0]
    semantics = Semantics(embeddings, params.eval.cluster_threshold)
    free_text = samples[samples["task"] == "consistency"]["text"]
    length_model = fit_length_model([response_entropy(t) for t in free_text], [len(words(t)) for t in free_text])
    by_key = {key: rows for key, rows in samples.groupby(["group_id", "variant_id", "model"], sort=False)}
    rows_c, rows_d = [], []
    for group in groups:
        texts, truncated = {"base": {}, "tuned": {}}, {}
        for model in texts:
            flags = []
            for member in group.members:
                rows = by_key.get((group.group_id, member.variant_id, model))
                if rows is None:
                    raise EvaluationInputError(f"samples: no {model} samples of group {group.group_id}, variant {member.variant_id}")
                rows = rows.sort_values("sample")
                texts[model][member.variant_id] = list(rows["text"])
                flags += [bool(flag) for flag in rows["truncated"]]
            truncated[model] = float(np.mean(flags))
        if group.task == "consistency":
            rows_c.append(
                consistency_record(
                    group, texts["base"], texts["tuned"], params.reward.entropy_max_words, semantics,
                    axis=params.eval.gap_axis, truncated=truncated, entropy_scope=params.reward.entropy_scope,
                    length_model=length_model,
                )
            )  # fmt: skip
        else:
            normalize = get_normalizer(group.answer_normalizer or DEFAULT_NORMALIZER)
            variant = group.members[0].variant_id
            rows_d.append(
                diversity_record(
                    group, texts["base"][variant], texts["tuned"][variant], normalize, params.reward.entropy_max_words,
                    semantics, entropy_scope=params.reward.entropy_scope,
                )
            )  # fmt: skip
    return pd.DataFrame(rows_c), pd.DataFrame(rows_d)


def summary_settings(params: Params) -> SummarySettings:
    """The evaluation's summary settings from params (significance, truncation rule, power, bootstrap)."""
    cfg = params.eval
    return SummarySettings(
        alpha=cfg.significance_level, max_truncated_share=cfg.max_truncated_share, max_new_tokens=cfg.max_new_tokens,
        power=cfg.power, bootstrap_resamples=cfg.bootstrap_resamples, confidence_level=cfg.confidence_level,
        seed=params.eval_seed,
    )  # fmt: skip


@dataclass
class FairnessResults:
    """The fairness benchmarks of an evaluation, summarised: `fairness.<benchmark>` of metrics.json,
    the ``fairness`` family of comparisons and the per-question effects of the decision benchmarks,
    and ``bbq`` of metrics.json."""

    summaries: dict[str, BenchmarkSummary] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)
    effects: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EFFECT_COLUMNS))
    bbq: BbqSummary | None = None


def fairness_results(frames: EvaluationFrames, params: Params) -> FairnessResults:
    cfg, out = params.eval, FairnessResults()
    parts = []
    for decisions in frames.decisions:
        summary, comparisons, effects = summarize_decisions(
            decisions, alpha=cfg.significance_level, n_resamples=cfg.bootstrap_resamples,
            confidence=cfg.confidence_level, seed=params.eval_seed,
        )  # fmt: skip
        out.summaries[summary.benchmark] = summary
        out.comparisons += comparisons
        parts.append(effects)
    if parts:
        out.effects = pd.concat(parts, ignore_index=True)
    if frames.bbq is not None:
        out.bbq = summarize_bbq(frames.bbq, n_resamples=cfg.bootstrap_resamples, confidence=cfg.confidence_level, seed=params.eval_seed)
    return out


def evaluation_summary(
    frames: EvaluationFrames, params: Params, evaluated: EvaluatedFiles | None, fairness: FairnessResults | None = None
) -> EvaluationSummary:
    """metrics.json of an evaluation: `summarize`'s statistics, the decision benchmarks (`fairness`),
    BBQ (`bbq`), what was evaluated (the candidate and the hashes of its files), how H_norm was
    scored and which engine sampled (a fallback first in the notes)."""
    content = summarize(frames.consistency, frames.diversity, summary_settings(params))
    fairness = fairness if fairness is not None else fairness_results(frames, params)
    if fairness.summaries:
        content["fairness"] = {name: s.to_dict() for name, s in fairness.summaries.items()}
    if fairness.bbq is not None:
        content["bbq"] = fairness.bbq.to_dict()
    if frames.engine.fell_back:
        content["notes"].insert(0, f"FALLBACK: {frames.engine.fallback_reason}; evaluated with {frames.engine.used}")
    if frames.instructions is not None:
        cfg = params.eval
        instructions = summarize_instructions(
            frames.instructions, frames.uninstructed, cfg.bootstrap_resamples, cfg.confidence_level, params.eval_seed
        )
        if instructions is not None:
            content["instructions"] = instructions.to_dict()
    content["split"] = params.eval.split
    if params.eval.split != "heldout":
        content["notes"].insert(0, f"CALIBRATION: judged on the {params.eval.split} split's groups (eval.split), not held-out ones")
    content["candidate"] = params.eval.candidate.model_dump()
    if evaluated is not None:
        content["evaluated"] = evaluated.to_dict()
    content["code"] = code_version().to_dict()
    content["helpfulness_definition"] = {"scope": params.reward.entropy_scope, "max_words": params.reward.entropy_max_words}
    content["engine"] = frames.engine.to_dict()
    return EvaluationSummary.from_dict(content)


def evaluate_snapshots(params: Params, groups: list[PromptGroup], checkpoints: Sequence[Path]) -> Iterator[tuple[Path, EvaluationSummary]]:
    """The summary of each checkpoint against the base model, in order (a learning curve's points):
    one engine for all, the base samples drawn once, no decision benchmarks (the curve plots the
    paper's gap); each summary as soon as its checkpoint is scored."""
    engine, _ = open_engine(params.eval.engine, params.paths.base_model, params.eval, params.eval.dtype, params.eval_seed)
    base_outputs = None
    try:
        for checkpoint in checkpoints:
            frames = evaluate_models(
                params, groups, params.paths.base_model, checkpoint, engine=engine, base_outputs=base_outputs, decide=False
            )
            base_outputs = frames.base_outputs
            yield checkpoint, evaluation_summary(frames, params, None)
    finally:
        engine.close()


def prepare_evaluation(params: Params, say: Callable[[str], None] = print) -> EvaluatedFiles:
    """Before anything is loaded: put back a checkpoint a killed save left aside, check the groups
    are validated (each message to `say`), the base weights have their recorded SHA-256 and the
    adapter loads, and return the hashes of what will be read (what metrics.json vouches for is
    what was read)."""
    from components.release.binding import EvaluationBinding, check_adapter_loads
    from components.validation.precondition import ensure_params_validated

    for name in params.eval.fairness.benchmarks:  # the data's hash, before minutes of sampling
        BENCHMARKS.get(name, where="eval.fairness.benchmarks").load(params.paths.benchmarks / name)
    checkpoint = CheckpointLayout(params.paths.checkpoints).latest
    if note := recover_checkpoint(checkpoint):
        say(note)
    say(ensure_params_validated(params))
    verified_base_model(params.paths.base_model)
    adapter = checkpoint / ADAPTER_DIR if params.eval.candidate.source == "adapter" else None
    if adapter is not None:
        check_adapter_loads(adapter)
    return EvaluationBinding.of(params, adapter).record()
