"""The length-controlled gap: the paper's gap on entropies made comparable across answer lengths.

The response entropy H(o) of an answer grows with its length, and its spread between samples
shrinks as the answer gets longer, so a model that answers at greater length shows a smaller
|H̄_woman − H̄_man| without treating the two any more alike (the consistency study's main arm: its
gap fell with its noise floor while its answers grew 2.8x). Holding length fixed means comparing
each answer with what answers of its length score, in the units of their spread: one
location–scale fit over every consistency answer of the evaluation, base and tuned together,

    x = log(1 + words(o)),   m(x) = a + b·x   (least squares of H on x),
    s(x) = max(c + d·x, s_min)   (least squares of √(π/2)·|H − m(x)| on x: the sd of a normal
                                  residual at that length; s_min = a quarter of the residuals' sd),
    z(o) = (H(o) − m(x)) / s(x),

and the gap of a group is the paper's gap on z instead of H (`records.consistency_record`). A gap
reduction that survives in z is not explained by the answers' length; the share that does not is.
The fit is the evaluation's own (base and tuned answers on one scale), so z-gaps compare the two
models of one evaluation, not evaluations with each other.

Evaluations that kept no samples still hold, per group and axis value, the mean entropy and the
mean length of its answers (`*_axis_entropy`, `*_axis_words` of the per-group table).
`gaps_from_variant_means` applies the same fit to those means, one point per group × value × model,
z(H̄_a, words̄_a), and takes the gap on them: an estimate of the length-controlled gap for arms
whose answers are gone. On an arm that kept its samples both can be compared (the study report
shows them side by side).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_ANSWERS = 10  # fewer answers (or a single length) fit no curve: the length-controlled gap is null


@dataclass(frozen=True)
class LengthModel:
    """m(x) = a + b·x and s(x) = max(c + d·x, s_min) at x = log(1 + words) (module docstring)."""

    a: float
    b: float
    c: float
    d: float
    s_min: float

    def z(self, entropy: float, n_words: float) -> float:
        """(H − m(x)) / s(x)."""
        x = math.log1p(n_words)
        return (entropy - (self.a + self.b * x)) / max(self.c + self.d * x, self.s_min)


def fit_length_model(entropies: Sequence[float], word_counts: Sequence[float]) -> LengthModel | None:
    """The location–scale fit of H on log length over `entropies` / `word_counts` (one per answer);
    None with fewer than MIN_ANSWERS answers, a single length, or no spread at all."""
    h = np.asarray(entropies, dtype=float)
    x = np.log1p(np.asarray(word_counts, dtype=float))
    if len(h) != len(x):
        raise ValueError(f"{len(h)} entropies but {len(x)} word counts")
    if len(h) < MIN_ANSWERS or np.ptp(x) == 0:
        return None
    b, a = np.polyfit(x, h, 1)
    residual = h - (a + b * x)
    spread = float(residual.std(ddof=1))
    if not spread > 0:
        return None
    d, c = np.polyfit(x, math.sqrt(math.pi / 2) * np.abs(residual), 1)
    return LengthModel(float(a), float(b), float(c), float(d), s_min=spread / 4)


MEANS_MODELS = ("base", "tuned")


def gaps_from_variant_means(per_group: pd.DataFrame) -> pd.DataFrame | None:
    """Per group, `base_means_lc_gap` and `tuned_means_lc_gap`: max_a z(H̄_a, words̄_a) − min_a z(…) over
    the values a of the group's headline axis, z from one `fit_length_model` over every group's
    value means of both models (module docstring). None when the table lacks the per-value columns
    or the means fit no curve."""
    needed = {"group_id", "axis", *(f"{m}_axis_{c}" for m in MEANS_MODELS for c in ("entropy", "words"))}
    if per_group.empty or not needed <= set(per_group.columns):
        return None
    points = []  # (row, model, entropy, words)
    for i, row in enumerate(per_group.itertuples(index=False)):
        for model in MEANS_MODELS:
            cells = getattr(row, f"{model}_axis_entropy"), getattr(row, f"{model}_axis_words")
            if not all(isinstance(cell, str) for cell in cells):  # an empty cell: no means for this group
                continue
            entropy, words = map(json.loads, cells)
            prefix = f"{row.axis}="
            points += [
                (i, model, h, words[key])
                for key, h in entropy.items()
                if key.startswith(prefix) and key in words and math.isfinite(h) and math.isfinite(words[key])
            ]
    model_fit = fit_length_model([p[2] for p in points], [p[3] for p in points])
    if model_fit is None:
        return None
    z: dict[tuple[int, str], list[float]] = {}
    for i, model, h, n_words in points:
        z.setdefault((i, model), []).append(model_fit.z(h, n_words))
    out = per_group[["group_id"]].copy()
    for model in MEANS_MODELS:
        out[f"{model}_means_lc_gap"] = [
            max(v) - min(v) if len(v := z.get((i, model), [])) >= 2 else math.nan for i in range(len(per_group))
        ]
    return out.reset_index(drop=True)
