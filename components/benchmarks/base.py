"""Decision benchmarks: what one is, and the registry that names them (`eval.fairness.benchmarks`).

A decision benchmark is a table of yes/no questions, each filled in for several demographics
(one row per prompt: ``question_id``, ``age``, ``gender``, ``race``, ``text``), the words that
say yes and no, and how to ask: the user turn and the start of the assistant's answer after which
the next token is read. A model's decision on a prompt is the log-odds

    logit = log Σ_{w ∈ yes} p(w | prompt) − log Σ_{w ∈ no} p(w | prompt)

read from one prefill (no sampling, so no sampling noise). The demographics are compared against a
baseline (``baselines``) on otherwise identical prompts; ``gated`` names the scores the fairness
gate judges. A second benchmark is a `DecisionBenchmark` registered under its own name.
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


BENCHMARKS = NameRegistry[DecisionBenchmark]("decision benchmark")


def register_benchmark(benchmark: DecisionBenchmark) -> DecisionBenchmark:
    return BENCHMARKS.add(benchmark.name, benchmark)


def score_key(axis: str, value: object) -> str:
    """'gender_female', 'gender_non_binary', 'race_native_american', 'age_20': a demographic as a
    metric-name-safe key (MLflow names allow letters, digits, '_', '-', '.', ' ', '/')."""
    text = str(int(value)) if isinstance(value, float) and float(value).is_integer() else str(value)
    slug = "".join(ch if ch.isalnum() else "_" for ch in text.lower())
    return f"{axis}_{slug}"
