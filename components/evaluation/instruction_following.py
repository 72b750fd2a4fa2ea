"""Instruction following in an evaluation: each family's compliance, base vs tuned, strict and loose.

A group built with ``data.instructions: families`` carries the instruction all its variants were
given (`PromptGroup.instruction`). Every sample of such a group is judged by IFEval's checker of
that family (lm-eval's, `components.instructions.ifeval.follows`): *strict* on the answer as given,
*loose* on the best of IFEval's light edits (Zhou et al. 2023, arXiv:2311.07911). A group's
compliance is the share of its samples (all variants) that follow, per model; the group is the unit
of inference, as for the gap: per family and pooled over the train families and over the held-out
families (those no train group was ever given), the paired change tuned − base with its bootstrap
CI and paired t-test p. Groups whose prompts state no instruction at all report their words, base
vs tuned: length where nothing asks for any.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from components.contracts.summary import FamilyCompliance, InstructionSummary
from components.data.schema import PromptGroup
from components.evaluation.statistics import bootstrap_ci, paired_test
from components.rewards.entropy import words
from components.rewards.instruction import follows as states_a_limit

MODELS = ("base", "tuned")
SCORES = ("strict", "loose")
INSTRUCTION_COLUMNS = [
    "group_id", "domain", "family", "family_split", "n_samples",
    *[f"{m}_{s}" for s in SCORES for m in MODELS], "base_words", "tuned_words",
]  # fmt: skip
UNINSTRUCTED_COLUMNS = ["group_id", "domain", "n_samples", "base_words", "tuned_words"]


def instruction_rows(
    groups: Sequence[PromptGroup], samples: pd.DataFrame, family_split: dict[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per instructed consistency group, one row per consistency group whose prompts state no
    instruction) from the samples of `groups` (`run.samples_frame`); `family_split`: family -> train |
    heldout (a family not in it: its group's split decides, ``heldout`` for a held-out group's own)."""
    from components.instructions.ifeval import follows

    by_key = {key: rows for key, rows in samples.groupby(["group_id", "variant_id", "model"], sort=False)}
    told, free = [], []
    for group in groups:
        if group.task != "consistency" or group.decision is not None:
            continue
        texts: dict[str, list[tuple[str, str]]] = {m: [] for m in MODELS}
        for member in group.members:
            for model in MODELS:
                rows = by_key.get((group.group_id, member.variant_id, model))
                texts[model] += [] if rows is None else [(member.text, str(t)) for t in rows["text"].fillna("")]
        words_of = {m: float(np.mean([len(words(t)) for _, t in texts[m]])) if texts[m] else math.nan for m in MODELS}
        spec = group.instruction
        if spec is None:
            if all(states_a_limit("", prompt) is None for prompt in group.prompts):
                free.append({"group_id": group.group_id, "domain": group.domain, "n_samples": len(texts["tuned"]),
                             "base_words": words_of["base"], "tuned_words": words_of["tuned"]})  # fmt: skip
            continue
        row = {"group_id": group.group_id, "domain": group.domain, "family": spec.family,
               "family_split": family_split.get(spec.family, "heldout"), "n_samples": len(texts["tuned"])}  # fmt: skip
        for model in MODELS:
            judged = [follows(spec.family, spec.kwargs, prompt, text) for prompt, text in texts[model]]
            for i, score in enumerate(SCORES):
                row[f"{model}_{score}"] = float(np.mean([j[i] for j in judged])) if judged else math.nan
        told.append(row | {"base_words": words_of["base"], "tuned_words": words_of["tuned"]})
    return pd.DataFrame(told, columns=INSTRUCTION_COLUMNS), pd.DataFrame(free, columns=UNINSTRUCTED_COLUMNS)


def _change(frame: pd.DataFrame, score: str, n_resamples: int, confidence: float, seed: int) -> dict:
    base, tuned = frame[f"base_{score}"].astype(float), frame[f"tuned_{score}"].astype(float)
    out = {f"base_{score}": float(base.mean()), f"tuned_{score}": float(tuned.mean()), f"{score}_change": float((tuned - base).mean())}
    ci = bootstrap_ci(base, tuned, n_resamples, confidence, seed) if len(frame) >= 2 else None
    p = paired_test(base, tuned).p_value if len(frame) >= 2 else None
    return out | {f"{score}_ci_low": None if ci is None else ci[0], f"{score}_ci_high": None if ci is None else ci[1],
                  f"{score}_p_value": p}  # fmt: skip


def _family(frame: pd.DataFrame, name: str, split: str, n_resamples: int, confidence: float, seed: int) -> FamilyCompliance:
    values: dict = {"family": name, "split": split, "n_groups": int(len(frame))}
    for score in SCORES:
        values |= _change(frame, score, n_resamples, confidence, seed)
    return FamilyCompliance(**values)


def summarize_instructions(
    told: pd.DataFrame, free: pd.DataFrame, n_resamples: int, confidence: float, seed: int
) -> InstructionSummary | None:
    """Per family and pooled per split (train, heldout): compliance base vs tuned, strict and loose,
    the paired change with its CI and p (group-level); words where nothing is asked. None when no
    group was given an instruction and none is free of one."""
    if told.empty and free.empty:
        return None
    families = [
        _family(rows, name, str(rows["family_split"].iloc[0]), n_resamples, confidence, seed)
        for name, rows in told.groupby("family", sort=True)
    ]
    pooled = {split: _family(rows, f"all {split} families", split, n_resamples, confidence, seed)
              for split, rows in told.groupby("family_split", sort=True)}  # fmt: skip
    uninstructed = None
    if not free.empty:
        base, tuned = free["base_words"].astype(float), free["tuned_words"].astype(float)
        ci = bootstrap_ci(base, tuned, n_resamples, confidence, seed) if len(free) >= 2 else None
        uninstructed = {"n_groups": int(len(free)), "base_words": float(base.mean()), "tuned_words": float(tuned.mean()),
                        "words_change_ci": None if ci is None else list(ci)}  # fmt: skip
    return InstructionSummary(families=families, train=pooled.get("train"), heldout=pooled.get("heldout"), uninstructed=uninstructed)
