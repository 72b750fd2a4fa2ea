"""A gate's own noise: how much the base model "worsens" against itself.

An A/A evaluation (``eval.candidate.source: base`` with another seed) judges the base model against
itself, so every worsening a gate measures there is sampling noise. Over R such evaluations, with
the gate's values w_1..w_R (its worsening, e.g. base − tuned coverage), the one-sided 95 % noise
level of the gate is

    level = z_0.95 · sqrt(mean_k w_k²)        (z_0.95 = 1.645; an A/A difference has mean 0)

A threshold below its level refuses an unchanged model more than 5 % of the time: the gate then
judges the evaluation's seed, not the model. `suggested` is the threshold raised to its level,
rounded up to 0.01 (a threshold at or above its level stays). The study `gate-noise` runs the A/A
evaluations on the train split (held-out data judges models, it does not set their gates).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from components.config import GateConfig
from components.release.gate import GATES, judge

Z_95 = 1.6448536269514722  # one-sided 95 % quantile of the standard normal


@dataclass(frozen=True)
class GateNoise:
    """One gate over R A/A evaluations: its values and verdicts, its noise level."""

    gate: str
    threshold_field: str
    threshold: float
    values: tuple[float, ...]
    passed: tuple[bool, ...]  # the gate's verdict on each A/A evaluation at `threshold`
    level: float  # Z_95 · RMS of `values`
    suggested: float  # max(threshold, level rounded up to 0.01)

    @property
    def refused(self) -> int:
        """A/A evaluations the gate refused at `threshold`."""
        return self.passed.count(False)

    def row(self) -> dict:
        return {"gate": self.gate, "threshold_field": self.threshold_field, "threshold": self.threshold, "n": len(self.values),
                "refused": self.refused, "mean": sum(self.values) / len(self.values), "max": max(self.values),
                "level_95": self.level, "suggested": self.suggested}  # fmt: skip


def gate_noise(summaries: Iterable[Mapping], gate: GateConfig, section: str = "diversity") -> list[GateNoise]:
    """Each gate of `section` (with a threshold) judged on every A/A summary (metrics.json dicts)."""
    summaries = list(summaries)
    if not summaries:
        raise ValueError("gate noise: no A/A evaluation given")
    out = []
    for spec in GATES.values():
        if spec.section != section or spec.threshold is None:
            continue
        results = [judge(spec, summary, gate) for summary in summaries]
        values = tuple(float(r.value) for r in results if r.value is not None)
        if len(values) != len(results):
            continue  # a gate that measured nothing here (e.g. no diversity task) has no noise to report
        level = Z_95 * math.sqrt(sum(v * v for v in values) / len(values))
        threshold = spec.limit(gate)
        suggested = max(threshold, math.ceil(round(level * 100, 9)) / 100)
        out.append(GateNoise(spec.name, spec.threshold, threshold, values, tuple(r.passed for r in results), level, suggested))
    return out
