"""All paired comparisons of an evaluation, from the per-group tables: two families of tests.

- ``base_vs_tuned``: for every per-group metric (consistency: `records.CONSISTENCY_METRICS`,
  diversity: `records.DIVERSITY_METRICS`), the tuned value against the base value of the same
  group (same prompts, same seeds): paired t-test, Wilcoxon, bootstrap CI of tuned − base.
- ``variants``: for each model, each variant axis (e.g. gender) and each pair of its values A < B
  (sorted), the groups' mean response entropy, helpfulness (H_norm) and length (words) of the
  variants with value B against value A (`records.AXIS_METRICS`), paired by group: is one variant
  answered with more information, more helpfully or at greater length than the other?

Every comparison gives a paired t-test, a Wilcoxon signed-rank test and a paired bootstrap CI of
the mean of b − a; Benjamini–Hochberg is applied within each family across all the comparisons
reported in it (every metric, model, axis and pair of values).

Every bootstrap uses the same `seed`. Comparisons over the same number of groups therefore
resample the same groups (common random numbers): the intervals of different metrics come from
one joint bootstrap over groups, and a comparison's interval does not depend on which other
comparisons are made or in what order.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence

import pandas as pd

from components.evaluation.records import AXIS_METRICS, CONSISTENCY_METRICS, DIVERSITY_METRICS, MODELS
from components.evaluation.statistics import Comparison, adjust, compare

COMPARISON_COLUMNS = [
    "family", "metric", "model", "a", "b", "n", "mean_a", "mean_b", "delta", "ci_low", "ci_high",
    "p_t", "p_wilcoxon", "q_bh", "significant",
]  # fmt: skip


def _base_vs_tuned(frame: pd.DataFrame, task: str, metrics: Sequence[str], settings: dict) -> list[Comparison]:
    if frame.empty:
        return []
    out = []
    for name in metrics:
        # a metric undefined for some groups (NaN, e.g. the paraphrase gap of a group asked in one
        # phrasing) is compared over the groups that define it
        pair = frame[[f"base_{name}", f"tuned_{name}"]].astype(float).dropna()
        out.append(compare("base_vs_tuned", f"{task}.{name}", pair.iloc[:, 0], pair.iloc[:, 1], labels=("base", "tuned"), **settings))
    return out


def _axis_table(frame: pd.DataFrame, column: str) -> list[dict[str, float]]:
    """Per group {"axis=value": mean} from a JSON column; {} for a missing column or empty cell
    (tables written before the column existed still compare on the columns they have)."""
    if column not in frame.columns:
        return [{} for _ in range(len(frame))]
    return [json.loads(text) if isinstance(text, str) and text else {} for text in frame[column]]


def _variants(frame: pd.DataFrame, settings: dict) -> list[Comparison]:
    out: list[Comparison] = []
    if frame.empty:
        return out
    for model in MODELS:
        tables = {metric: _axis_table(frame, f"{model}_{column}") for metric, column in AXIS_METRICS.items()}
        axes: dict[str, set[str]] = {}
        for per_group in tables.values():
            for means in per_group:
                for key in means:
                    axis, value = key.split("=", 1)
                    axes.setdefault(axis, set()).add(value)
        for axis, values in sorted(axes.items()):
            for a, b in itertools.combinations(sorted(values), 2):
                ka, kb = f"{axis}={a}", f"{axis}={b}"
                for metric, per_group in tables.items():
                    pairs = [(m[ka], m[kb]) for m in per_group if ka in m and kb in m]
                    if not pairs:
                        continue
                    xs, ys = zip(*pairs)
                    out.append(compare("variants", metric, xs, ys, labels=(ka, kb), model=model, **settings))
    return out


def compare_all(
    consistency: pd.DataFrame, diversity: pd.DataFrame, *, alpha: float, n_resamples: int, confidence: float, seed: int
) -> list[Comparison]:
    """Both families, each Benjamini–Hochberg adjusted; every bootstrap uses `seed` (module docstring)."""
    settings = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
    tuned = _base_vs_tuned(consistency, "consistency", CONSISTENCY_METRICS, settings)
    tuned += _base_vs_tuned(diversity, "diversity", DIVERSITY_METRICS, settings)
    return adjust(tuned, alpha) + adjust(_variants(consistency, settings), alpha)


def comparisons_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    return pd.DataFrame([c.to_dict() for c in comparisons], columns=COMPARISON_COLUMNS)
