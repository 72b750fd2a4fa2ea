"""Fairness benchmarks: what one is, and the registry that names them (`eval.fairness.benchmarks`).

Two kinds. A `DecisionBenchmark` (DiscrimEval) asks yes/no questions filled in for several
demographics; a `ChoiceBenchmark` (BBQ) asks multiple-choice questions whose options name people of
different groups. Both are read from one prefill per prompt (no sampling).

A decision benchmark is a table of yes/no questions, each filled in for several demographics
(one row per prompt: ``question_id``, ``age``, ``gender``, ``race``, ``text``), the words that
say yes and no, and how to ask: the user turn and the start of the assistant's answer after which
the next token is read. A model's decision on a prompt is the log-odds

    logit = log Σ_{w ∈ yes} p(w | prompt) − log Σ_{w ∈ no} p(w | prompt)

read from one prefill (no sampling, so no sampling noise). The demographics are compared against a
baseline (``baselines``) on otherwise identical prompts; ``gated`` names the scores the fairness
gate judges. A second benchmark is a `DecisionBenchmark` registered under its own name.

A choice benchmark is a table of items (`ITEM_COLUMNS`): a context, a question, lettered options,
the correct option, the "unknown" option and the option that reflects the social bias the item
targets. The model's answer is the option whose letter has the highest log-probability as the next
token after the answer prefix. No gate judges one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from components.contracts.errors import UserError
from components.contracts.naming import NameRegistry

AXES = ("gender", "race", "age")
COLUMNS = ("question_id", "age", "gender", "race", "text")
# a choice benchmark's item: the options, the index of the correct one (label), of the "unknown" one
# and of the one that reflects the targeted social bias (biased), the context's condition and the
# question's polarity, and the set of items it was built with (instance) from a template
ITEM_COLUMNS = ("item_id", "instance", "template", "condition", "polarity", "context", "question", "options", "label", "unknown", "biased")


class BenchmarkDataError(UserError, ValueError):
    """A benchmark's data file is missing, altered or malformed (the message names the file and the fix)."""


@dataclass(frozen=True)
class DecisionBenchmark:
    """A registered decision benchmark.

    `prepare(folder)` fetches and checks its data into `folder` (idempotent); `load(folder)` returns
    the prompt table (`COLUMNS`) after checking the data; `split(question_ids)` maps a question to
    ``train`` or ``heldout`` (fixed, recorded in the data's manifest).
    """

    name: str
    prepare: Callable[[Path], dict]
    load: Callable[[Path], pd.DataFrame]
    split: Callable[[int], str]
    instruction: str  # appended to every question (the user turn)
    answer_prefix: str  # the start of the assistant's answer; the decision is its next token
    yes_words: tuple[str, ...]
    no_words: tuple[str, ...]
    baselines: dict[str, object]  # axis -> the reference value ("male", "white", 60)
    gated: tuple[str, ...]  # score keys the fairness gate judges

    def user_turn(self, text: str) -> str:
        return f"{text}{self.instruction}"


@dataclass(frozen=True)
class ChoiceBenchmark:
    """A registered multiple-choice benchmark.

    `prepare(folder)` fetches and checks its data into `folder` (idempotent); `load(folder)` returns
    the item table (`ITEM_COLUMNS`) after checking the data. Every item is held out (``split``): it
    never reaches training.
    """

    name: str
    prepare: Callable[[Path], dict]
    load: Callable[[Path], pd.DataFrame]
    letters: tuple[str, ...]  # the options' letters, in order; each one token
    instruction: str  # after the lettered options (the user turn)
    answer_prefix: str  # the start of the assistant's answer; the answer is its next token

    def split(self, item: int) -> str:
        return "heldout"

    def user_turn(self, context: str, question: str, options: list[str], extra: str | None = None) -> str:
        """The context and question, one '(A) option' line per option, `extra` (a candidate's
        instruction) when given, then the instruction."""
        lines = "\n".join(f"({letter}) {option}" for letter, option in zip(self.letters, options, strict=True))
        return f"{context}\n{question}\n{lines}" + (f"\n\n{extra}" if extra else "") + self.instruction


Benchmark = DecisionBenchmark | ChoiceBenchmark
BENCHMARKS = NameRegistry[Benchmark]("fairness benchmark")


def register_benchmark(benchmark: Benchmark) -> Benchmark:
    return BENCHMARKS.add(benchmark.name, benchmark)


def score_key(axis: str, value: object) -> str:
    """'gender_female', 'gender_non_binary', 'race_native_american', 'age_20': a demographic as a
    metric-name-safe key (MLflow names allow letters, digits, '_', '-', '.', ' ', '/')."""
    text = str(int(value)) if isinstance(value, float) and float(value).is_integer() else str(value)
    slug = "".join(ch if ch.isalnum() else "_" for ch in text.lower())
    return f"{axis}_{slug}"
