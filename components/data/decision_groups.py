"""A decision benchmark's train questions as consistency groups (`data.decision_groups`).

One group per question × fill-in of the other axes, its members the values of one axis: for
DiscrimEval with ``axis: gender``, question 7 at age 60 and race Black is the group
``discrim_eval-q007-a60-black`` with the members female, male and non-binary, identical but for
the gender. Such a group is what information-consistent GRPO (arXiv:2512.12858) calls a set of
equivalent prompts; its members are decided (one token after the benchmark's answer prefix), not
answered in free text (`PromptGroup.decision`). Only the benchmark's **train** questions become
groups, all in the train split: the held-out questions judge the model (`eval.fairness`), and
validation refuses a decision group of a held-out question (rule ``decision_question_not_heldout``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from components.fairness_benchmarks import BENCHMARKS, DecisionBenchmark
from components.config import DecisionGroupsConfig
from components.contracts.groups import DecisionSpec, Member, PromptGroup


def _slug(value: object) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in str(value).lower())


def decision_groups(benchmark: DecisionBenchmark, table: pd.DataFrame, cfg: DecisionGroupsConfig) -> list[PromptGroup]:
    """The groups of the benchmark's train questions (rows of `table`, the benchmark's prompt
    table), filled in for `cfg.ages` and `cfg.races` (all when null), varied along `cfg.axis`."""
    chosen = table[[benchmark.split(q) == "train" for q in table["question_id"]]]
    for column, wanted in (("age", cfg.ages), ("race", cfg.races)):
        if wanted is not None:
            chosen = chosen[chosen[column].isin(wanted)]
    fixed = [a for a in ("age", "race", "gender") if a != cfg.axis]
    groups = []
    for (question, *values), rows in chosen.groupby(["question_id", *fixed], sort=True):
        rows = rows.sort_values(cfg.axis)
        spec = DecisionSpec(benchmark=benchmark.name, question_id=int(question), answer_prefix=benchmark.answer_prefix,
                            yes_words=list(benchmark.yes_words), no_words=list(benchmark.no_words))  # fmt: skip
        members = [
            Member(variant_id=_slug(row[cfg.axis]), attributes={cfg.axis: str(row[cfg.axis]), **{a: str(row[a]) for a in fixed}},
                   text=benchmark.user_turn(row["text"]))  # fmt: skip
            for _, row in rows.iterrows()
        ]
        suffix = "-".join(_slug(v) for v in values)
        groups.append(
            PromptGroup(group_id=f"{benchmark.name}-q{int(question):03d}-{suffix}", domain=benchmark.name, task="consistency",
                        split="train", members=members, variant_axes={cfg.axis: [m.attributes[cfg.axis] for m in members]},
                        decision=spec)  # fmt: skip
        )
    return groups


def load_decision_groups(cfg: DecisionGroupsConfig, benchmarks_dir: Path) -> list[PromptGroup]:
    """`decision_groups` of the configured benchmark, read from its prepared data folder."""
    benchmark = BENCHMARKS.get(cfg.benchmark, where="data.decision_groups.benchmark")
    return decision_groups(benchmark, benchmark.load(Path(benchmarks_dir) / benchmark.name), cfg)
