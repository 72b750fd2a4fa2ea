"""All paired comparisons of an evaluation, from the per-group tables: two families of tests.

- ``base_vs_tuned``: for every per-group metric (consistency: `records.CONSISTENCY_METRICS`,
  diversity: `records.DIVERSITY_METRICS`), the tuned value against the base value of the same
  group (same prompts, same seeds): paired t-test, Wilcoxon, bootstrap CI of tuned − base.
- ``variants``: for each model and each variant axis (e.g. gender), the mean response entropy of
  the groups' variants with value B against value A (values in sorted order), paired by group: is
  one variant answered with more information than the other?

Benjamini–Hochberg is applied within each family across the metrics reported.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

import pandas as pd

from components.evaluation.records import CONSISTENCY_METRICS, DIVERSITY_METRICS, MODELS
from components.evaluation.statistics import Comparison, adjust, compare

COMPARISON_COLUMNS = [
    "family", "metric", "model", "a", "b", "n", "mean_a", "mean_b", "delta", "ci_low", "ci_high",
    "p_t", "p_wilcoxon", "q_bh", "significant",
]  # fmt: skip


def _base_vs_tuned(frame: pd.DataFrame, task: str, metrics: Sequence[str], settings: dict) -> list[Comparison]:
    if frame.empty:
        return []
    return [
        compare(
            "base_vs_tuned", f"{task}.{name}", frame[f"base_{name}"].astype(float), frame[f"tuned_{name}"].astype(float),
            labels=("base", "tuned"), **settings,
        )  # fmt: skip
        for name in metrics
    ]


def _variants(frame: pd.DataFrame, settings: dict) -> list[Comparison]:
    out: list[Comparison] = []
    if frame.empty:
        return out
    for model in MODELS:
        per_group = [json.loads(text) for text in frame[f"{model}_axis_entropy"]]
        axes: dict[str, set[str]] = {}
        for entropies in per_group:
            for key in entropies:
                axis, value = key.split("=", 1)
                axes.setdefault(axis, set()).add(value)
        for axis, values in sorted(axes.items()):
            for a, b in itertools.combinations(sorted(values), 2):
                ka, kb = f"{axis}={a}", f"{axis}={b}"
                pairs = [(e[ka], e[kb]) for e in per_group if ka in e and kb in e]
                if not pairs:
                    continue
                xs, ys = zip(*pairs)
                out.append(compare("variants", "response_entropy", xs, ys, labels=(ka, kb), model=model, **settings))
    return out


def compare_all(
    consistency: pd.DataFrame, diversity: pd.DataFrame, *, alpha: float, n_resamples: int, confidence: float, seed: int
) -> list[Comparison]:
    """Both families, each Benjamini–Hochberg adjusted; bootstrap seeds are derived from `seed`."""
    settings = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
    tuned = _base_vs_tuned(consistency, "consistency", CONSISTENCY_METRICS, settings)
    tuned += _base_vs_tuned(diversity, "diversity", DIVERSITY_METRICS, settings)
    return adjust(tuned, alpha) + adjust(_variants(consistency, settings), alpha)


def comparisons_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    return pd.DataFrame([c.to_dict() for c in comparisons], columns=COMPARISON_COLUMNS)
