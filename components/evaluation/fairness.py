"""Decision benchmarks in the evaluation: choose the prompts, read base and tuned decisions from
the engine, and summarise them (`discrimination`) into `fairness.<benchmark>` of metrics.json.

Decisions are log-odds of yes over no from one prefill per prompt (`GenerationEngine.choice_logprobs`):
no sampling, so the same model and prompts give the same scores. The answer words are those of the
benchmark that the tokenizer writes as one token ("yes", "Yes", ...; a word of several tokens has
no single next-token probability and is left out, a benchmark with no yes or no word left is refused).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit, logsumexp

from components.config import FairnessConfig
from components.contracts.summary import BenchmarkSummary, DiscriminationScore
from components.evaluation.base_outputs import BaseOutputs
from components.evaluation.discrimination import (
    demographics,
    matched_pairs,
    mixed_scores,
    paired_check,
    per_question_effects,
    profile_correlation,
)
from components.evaluation.statistics import Comparison, adjust, compare
from components.fairness_benchmarks import BENCHMARKS, BenchmarkDataError, DecisionBenchmark
from components.generation.interface import ChoicePrompt, GenerationEngine
from components.generation.sampling import single_token_ids

FAMILY = "fairness"
DECISION_COLUMNS = ["benchmark", "question_id", "age", "gender", "race", "base_logit", "tuned_logit"]
EFFECT_COLUMNS = ["benchmark", "question_id", "demographic", "base_effect", "tuned_effect"]


@dataclass
class Decisions:
    """One benchmark's prompts with both models' log-odds (`DECISION_COLUMNS` but benchmark) and
    the seconds each model took."""

    benchmark: DecisionBenchmark
    split: str
    table: pd.DataFrame
    seconds: dict[str, float]
    reused: tuple[str, ...] = ()  # the models whose logits were kept ones (`BaseOutputs`), not computed


def select_prompts(benchmark: DecisionBenchmark, table: pd.DataFrame, cfg: FairnessConfig) -> pd.DataFrame:
    """The prompts that judge a model: questions of `cfg.split` (the first `max_questions` ids),
    filled in for `cfg.ages` and `cfg.races` (all when null) and every gender."""
    where = f"eval.fairness ({benchmark.name})"
    ids = sorted(q for q in table["question_id"].unique() if cfg.split == "all" or benchmark.split(q) == cfg.split)
    ids = ids[: cfg.max_questions] if cfg.max_questions else ids
    chosen = table[table["question_id"].isin(ids)]
    for axis, wanted in (("age", cfg.ages), ("race", cfg.races)):
        if wanted is not None:
            unknown = sorted(set(wanted) - set(table[axis]), key=str)
            if unknown:
                raise BenchmarkDataError(f"{where}: {axis}s {unknown} are not in the benchmark; it has {sorted(set(table[axis]), key=str)}")
            chosen = chosen[chosen[axis].isin(wanted)]
    if chosen.empty:
        raise BenchmarkDataError(f"{where}: no prompts selected (split {cfg.split!r}, max_questions {cfg.max_questions})")
    return chosen.reset_index(drop=True)


def decision_logits(engine: GenerationEngine, benchmark: DecisionBenchmark, texts: list[str], adapter: Path | None) -> np.ndarray:
    """logit = log Σ_yes p(w) − log Σ_no p(w) of each prompt's next token after the answer prefix."""
    yes = single_token_ids(engine.tokenizer, benchmark.yes_words, benchmark.name, BenchmarkDataError)
    no = single_token_ids(engine.tokenizer, benchmark.no_words, benchmark.name, BenchmarkDataError)
    prompts = [ChoicePrompt(benchmark.user_turn(t), benchmark.answer_prefix) for t in texts]
    logprobs = np.asarray(engine.choice_logprobs(prompts, yes + no, adapter), dtype=float).reshape(len(texts), len(yes) + len(no))
    return logsumexp(logprobs[:, : len(yes)], axis=1) - logsumexp(logprobs[:, len(yes) :], axis=1)


def run_decisions(
    engine: GenerationEngine, cfg: FairnessConfig, data_dir: Path, adapter: Path | None, kept: BaseOutputs | None = None
) -> list[Decisions]:
    """Every decision benchmark of `cfg.benchmarks` (a choice benchmark, BBQ, is `bbq.run_bbq`'s),
    base (no adapter; from `kept` where it holds them) then the candidate (`adapter`; its questions
    followed by `cfg.candidate_instruction` when one is set)."""
    out = []
    for name in cfg.benchmarks:
        benchmark = BENCHMARKS.get(name, where="eval.fairness.benchmarks")
        if not isinstance(benchmark, DecisionBenchmark):
            continue
        table = select_prompts(benchmark, benchmark.load(Path(data_dir) / name), cfg)
        texts, seconds, reused = table["text"].tolist(), {}, ()
        intervened = [f"{t}\n\n{cfg.candidate_instruction}" for t in texts] if cfg.candidate_instruction else texts
        for model, which, asked in (("base", None, texts), ("tuned", adapter, intervened)):
            started = time.perf_counter()
            if model == "base" and kept is not None:
                inputs = {"benchmark": name, "turns": [benchmark.user_turn(t) for t in asked], "prefix": benchmark.answer_prefix,
                          "yes": benchmark.yes_words, "no": benchmark.no_words}  # fmt: skip
                table["base_logit"], was_kept = kept.logits(inputs, len(asked), partial(decision_logits, engine, benchmark, asked, None))
                reused += ("base",) * was_kept
            else:
                table[f"{model}_logit"] = decision_logits(engine, benchmark, asked, which)
            seconds[model] = 0.0 if model in reused else time.perf_counter() - started
        out.append(Decisions(benchmark, cfg.split, table.drop(columns="text"), seconds, reused))
    return out


def _score(demo, n_pairs: int, n_questions: int, fits: dict, checks: dict, change: Comparison) -> DiscriminationScore:
    fields: dict = {"axis": demo.axis, "value": str(demo.value), "baseline": str(demo.baseline), "n_pairs": n_pairs, "n_questions": n_questions,
                    "delta": change.delta, "delta_ci_low": change.ci_low, "delta_ci_high": change.ci_high,
                    "delta_p_value": change.p_t, "delta_q_value": change.q_bh}  # fmt: skip
    for model in ("base", "tuned"):
        fit, check = fits[model].get(demo.key), checks[model][demo.key]
        fields |= {
            f"{model}_score": fit.estimate if fit else None, f"{model}_ci_low": fit.ci_low if fit else None,
            f"{model}_ci_high": fit.ci_high if fit else None, f"{model}_p_value": fit.p_value if fit else None,
            f"{model}_paired_diff": check.estimate, f"{model}_paired_ci_low": check.ci_low, f"{model}_paired_ci_high": check.ci_high,
        }  # fmt: skip
    return DiscriminationScore(**fields)


def summarize_decisions(
    decisions: Decisions, *, alpha: float, n_resamples: int, confidence: float, seed: int
) -> tuple[BenchmarkSummary, list[Comparison], pd.DataFrame]:
    """The benchmark's `BenchmarkSummary`, its base-vs-tuned comparisons (BH within the benchmark)
    and the per-question effects (`EFFECT_COLUMNS`)."""
    bench, table = decisions.benchmark, decisions.table
    demos = demographics(table, bench.baselines)
    effects = {m: per_question_effects(table, f"{m}_logit", bench.baselines) for m in ("base", "tuned")}
    fits, methods = {}, set()
    for model in ("base", "tuned"):
        fits[model], method = mixed_scores(table, f"{model}_logit", bench.baselines, confidence)
        methods.add(method)
    checks = {m: {d.key: paired_check(effects[m][d.key], confidence) for d in demos} for m in ("base", "tuned")}
    paired = {d.key: pd.concat([effects["base"][d.key], effects["tuned"][d.key]], axis=1).dropna() for d in demos}
    comparisons = adjust(
        [
            compare(
                FAMILY,
                f"{bench.name}.{key}",
                pair.iloc[:, 0],
                pair.iloc[:, 1],
                labels=("base", "tuned"),
                n_resamples=n_resamples,
                confidence=confidence,
                seed=seed,
            )  # fmt: skip
            for key, pair in paired.items()
        ],
        alpha,
    )
    by_metric = {c.metric: c for c in comparisons}
    scores = {
        d.key: _score(
            d, matched_pairs(table, d), int(effects["base"][d.key].notna().sum()), fits, checks, by_metric[f"{bench.name}.{d.key}"]
        )
        for d in demos
    }
    summary = BenchmarkSummary(
        benchmark=bench.name, split=decisions.split, n_questions=int(table["question_id"].nunique()), n_prompts=len(table),
        question_ids=sorted(int(q) for q in table["question_id"].unique()), ages=sorted(int(a) for a in table["age"].unique()),
        races=sorted(str(r) for r in table["race"].unique()), method="/".join(sorted(methods)), gated=list(bench.gated),
        base_mean_logit=float(table["base_logit"].mean()), tuned_mean_logit=float(table["tuned_logit"].mean()),
        base_yes_share=float((table["base_logit"] > 0).mean()), tuned_yes_share=float((table["tuned_logit"] > 0).mean()),
        base_p_yes=float(expit(table["base_logit"]).mean()), tuned_p_yes=float(expit(table["tuned_logit"]).mean()),
        profile_correlation=profile_correlation(table, "base_logit", "tuned_logit"), scores=scores,
    )  # fmt: skip
    return summary, comparisons, effects_long(bench.name, effects)


def effects_long(name: str, effects: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per-question effects of both models in long format (`EFFECT_COLUMNS`)."""
    base, tuned = effects["base"], effects["tuned"]
    rows = [
        {
            "benchmark": name,
            "question_id": int(q),
            "demographic": key,
            "base_effect": float(base.loc[q, key]),
            "tuned_effect": float(tuned.loc[q, key]),
        }
        for key in base.columns
        for q in base.index
        if pd.notna(base.loc[q, key]) and pd.notna(tuned.loc[q, key])
    ]
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)


def decisions_frame(decisions: list[Decisions]) -> pd.DataFrame:
    """Every benchmark's prompts and log-odds in one table (`DECISION_COLUMNS`)."""
    frames = [d.table.assign(benchmark=d.benchmark.name)[DECISION_COLUMNS] for d in decisions]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DECISION_COLUMNS)
