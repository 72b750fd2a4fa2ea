"""BBQ in the evaluation: choose the items, read base and tuned answers from the engine, and
summarise them (`bbq_scores`) into ``bbq`` of metrics.json. No gate reads it.

How an answer is read: the user turn is the item's context, its question and the three options as
"(A) ...", "(B) ...", "(C) ..." lines followed by "Answer with the letter of the correct option."
(`ChoiceBenchmark.user_turn`); the assistant's answer starts "The answer is (" and the model's answer
is the option whose letter has the highest log-probability as the next token, from one prefill per
item (`GenerationEngine.choice_logprobs`: vLLM's ``logprob_token_ids``, the transformers engine's
last-position log-softmax; no sampling, so the same model and items give the same answers).

Why the letter and not the options' own text: one prefill per item scores all three options through
the call both engines already serve for DiscrimEval, where the text of each option would need three
continuations scored token by token; and the three letters are one token each, where the options'
texts differ in length and frequency ("The man" against "Not enough information"), which biases a
comparison of their log-probabilities even when normalised by length (Holtzman et al. 2021, "Surface
Form Competition"). All options in one prompt, answered by letter, is the joint multiple-choice
format HELM's BBQ scenario uses (Liang et al. 2022). Its known weakness: a small model may prefer one letter whatever the question;
the option positions vary across BBQ's items, so such a model answers at chance (1/3) and the report
says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from components.config import FairnessConfig
from components.contracts.summary import BbqScore, BbqSummary
from components.evaluation.base_outputs import BaseOutputs
from components.evaluation.bbq_scores import CHANCE, Interval, bootstrap
from components.fairness_benchmarks import BENCHMARKS, BenchmarkDataError, ChoiceBenchmark
from components.fairness_benchmarks import bbq as data
from components.generation.interface import ChoicePrompt, GenerationEngine
from components.generation.sampling import single_token_ids

SCORING = "letter"  # the option whose letter is the likeliest next token after the answer prefix


@dataclass
class BbqAnswers:
    """BBQ's chosen items (`ITEM_COLUMNS` but the texts), both models' log-probabilities of each
    option's letter (a model's answer: the index of the largest), and the seconds each model took."""

    benchmark: ChoiceBenchmark
    items: pd.DataFrame
    logprobs: dict[str, np.ndarray]  # model -> items × letters
    seconds: dict[str, float]
    reused: tuple[str, ...] = ()  # the models whose log-probabilities were kept ones


def letter_logprobs(engine: GenerationEngine, benchmark: ChoiceBenchmark, turns: list[str], adapter: Path | None) -> np.ndarray:
    """items × letters: log p(letter | user turn, answer prefix) of each option's letter."""
    ids = [single_token_ids(engine.tokenizer, (letter,), benchmark.name, BenchmarkDataError)[0] for letter in benchmark.letters]
    prompts = [ChoicePrompt(turn, benchmark.answer_prefix) for turn in turns]
    return np.asarray(engine.choice_logprobs(prompts, ids, adapter), dtype=float).reshape(len(turns), len(ids))


def _flat(engine: GenerationEngine, benchmark: ChoiceBenchmark, turns: list[str]) -> np.ndarray:
    """The base model's `letter_logprobs` as one row (how `BaseOutputs.logits` keeps them)."""
    return letter_logprobs(engine, benchmark, turns, None).ravel()


def select_items(table: pd.DataFrame, cfg: FairnessConfig) -> pd.DataFrame:
    """The fixed subset of `cfg.bbq_items` items (`benchmarks.bbq.subset`; all when null)."""
    chosen = data.subset(table, cfg.bbq_items)
    if chosen.empty:
        raise BenchmarkDataError(f"eval.fairness ({data.NAME}): no items selected (bbq_items {cfg.bbq_items})")
    return chosen


def run_bbq(
    engine: GenerationEngine, cfg: FairnessConfig, data_dir: Path, adapter: Path | None, kept: BaseOutputs | None = None
) -> BbqAnswers | None:
    """BBQ when `cfg.benchmarks` names it (else None): base (no adapter; from `kept` where it holds
    them) then the candidate (`adapter`; `cfg.candidate_instruction` after its options when set)."""
    if data.NAME not in cfg.benchmarks:
        return None
    benchmark = BENCHMARKS.get(data.NAME, where="eval.fairness.benchmarks")
    items = select_items(benchmark.load(Path(data_dir) / data.NAME), cfg)
    rows = list(zip(items["context"], items["question"], items["options"]))
    asked = {"base": [benchmark.user_turn(*row) for row in rows],
             "tuned": [benchmark.user_turn(*row, extra=cfg.candidate_instruction) for row in rows]}  # fmt: skip
    logprobs, seconds, reused, shape = {}, {}, (), (len(rows), len(benchmark.letters))
    for model, which in (("base", None), ("tuned", adapter)):
        started = time.perf_counter()
        if model == "base" and kept is not None:
            inputs = {"benchmark": data.NAME, "turns": asked["base"], "prefix": benchmark.answer_prefix, "letters": benchmark.letters}
            flat, was_kept = kept.logits(inputs, shape[0] * shape[1], partial(_flat, engine, benchmark, asked["base"]))
            logprobs[model] = np.asarray(flat).reshape(shape)
            reused += ("base",) * was_kept
        else:
            logprobs[model] = letter_logprobs(engine, benchmark, asked[model], which)
        seconds[model] = 0.0 if model in reused else time.perf_counter() - started
    return BbqAnswers(benchmark, items.drop(columns=["context", "question", "options"]), logprobs, seconds, reused)


def _score(interval: Interval) -> BbqScore:
    def ends(ci: tuple[float, float] | None) -> tuple[float | None, float | None]:
        return (None, None) if ci is None else ci

    (bl, bh), (tl, th), (dl, dh) = ends(interval.base_ci), ends(interval.tuned_ci), ends(interval.delta_ci)
    return BbqScore(base=interval.base, base_ci_low=bl, base_ci_high=bh, tuned=interval.tuned, tuned_ci_low=tl, tuned_ci_high=th,
                    delta=interval.delta, delta_ci_low=dl, delta_ci_high=dh)  # fmt: skip


def summarize_bbq(answers: BbqAnswers, *, n_resamples: int, confidence: float, seed: int) -> BbqSummary:
    """``bbq`` of metrics.json: the items and every metric of `bbq_scores.METRICS`, base vs tuned."""
    items = answers.items
    choices = {model: rows.argmax(axis=1) for model, rows in answers.logprobs.items()}
    found = bootstrap(items, choices["base"], choices["tuned"], n_resamples=n_resamples, confidence=confidence, seed=seed)
    return BbqSummary(
        benchmark=data.NAME, category="Gender_identity", split="heldout", scoring=SCORING, n_items=len(items),
        n_ambiguous=int((items["condition"] == "ambig").sum()), n_disambiguated=int((items["condition"] == "disambig").sum()),
        n_templates=int(items["template"].nunique()), subset_seed=data.SUBSET_SEED, chance_accuracy=CHANCE,
        confidence_level=confidence, **{name: _score(interval) for name, interval in found.items()},
    )  # fmt: skip
