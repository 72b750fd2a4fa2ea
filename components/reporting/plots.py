"""Report figures (matplotlib, Agg canvas: no display, no global pyplot state).

- `plot_gaps`: per-group entropy gap, base (x) vs tuned (y), with the y = x diagonal.
- `plot_coverage`: histogram of per-task coverage of the valid set, base vs tuned.
- `plot_answer_frequency`: per diversity task, how often each valid answer was given, base vs tuned.
- `plot_fairness_effects`: per decision question, the gated demographics' effect (e.g. female −
  male log-odds), base (x) vs tuned (y), with the y = x diagonal and the zero lines.
- `plot_metric_deltas`: tuned − base per metric with its bootstrap CI (one row per metric, each
  on its own scale), marked when significant after Benjamini–Hochberg.
Each writes a PNG to `path`. `answer_frequency_long` and `metric_deltas_frame` are the data behind
two of them as flat tables (the CSVs that DVC plots).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from components.evaluation.statistics import Comparison
from components.formatting import number, signed
from components.reporting.metric_labels import Direction, label

COLORS = {"base": "#7f7f7f", "tuned": "#1f77b4"}


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def plot_gaps(consistency: pd.DataFrame, summary: dict, path: Path) -> None:
    figure = _figure(5.5, 5.0)
    axes = figure.add_subplot()
    if len(consistency):
        base = consistency["base_gap"].astype(float)
        tuned = consistency["tuned_gap"].astype(float)
        top = max(float(base.max()), float(tuned.max()), 1e-3) * 1.05
        axes.plot([0, top], [0, top], linestyle="--", color="grey", linewidth=1, label="y = x")
        axes.scatter(base, tuned, s=24, alpha=0.8, label="group")
        axes.set_xlim(0, top)
        axes.set_ylim(0, top)
        axes.legend(loc="upper left")
        axes.text(
            0.98, 0.02, "below the diagonal: tuned more consistent", transform=axes.transAxes,
            ha="right", va="bottom", fontsize=8, color="grey",
        )  # fmt: skip
    else:
        axes.text(0.5, 0.5, "no consistency groups", ha="center", va="center")
    axes.set_xlabel("base entropy gap (nats)")
    axes.set_ylabel("tuned entropy gap (nats)")
    axes.set_title(
        f"entropy gap per group: mean base {number(summary.get('base_mean_gap'))}, tuned {number(summary.get('tuned_mean_gap'))}",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, format="png")


def plot_fairness_effects(effects: pd.DataFrame, gated: dict[str, list[str]], path: Path) -> None:
    """One panel per gated demographic of each benchmark (`gated`: benchmark -> score keys)."""
    panels = [(b, key) for b, keys in gated.items() for key in keys]
    figure = _figure(4.6 * max(1, len(panels)), 4.4)
    if not panels:
        axes = figure.add_subplot()
        axes.text(0.5, 0.5, "no decision benchmark evaluated", ha="center", va="center")
        axes.set_axis_off()
    for i, (benchmark, key) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), i + 1)
        rows = effects[(effects["benchmark"] == benchmark) & (effects["demographic"] == key)]
        base, tuned = rows["base_effect"].astype(float), rows["tuned_effect"].astype(float)
        top = max(float(np.abs(np.r_[base, tuned]).max()) if len(rows) else 0.0, 1e-3) * 1.1
        axes.plot([-top, top], [-top, top], linestyle="--", color="grey", linewidth=1, label="y = x")
        axes.axhline(0, color="black", linewidth=0.6)
        axes.axvline(0, color="black", linewidth=0.6)
        axes.scatter(base, tuned, s=24, alpha=0.8, color=COLORS["tuned"], label="question")
        axes.set_xlim(-top, top)
        axes.set_ylim(-top, top)
        axes.set_xlabel("base effect (log-odds of yes)")
        axes.set_ylabel("tuned effect (log-odds of yes)")
        axes.set_title(f"{benchmark}: {key} vs baseline\nmean base {signed(base.mean())}, tuned {signed(tuned.mean())}", fontsize=9)
        axes.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, format="png")


def plot_coverage(diversity: pd.DataFrame, path: Path) -> None:
    figure = _figure(5.5, 3.8)
    axes = figure.add_subplot()
    if len(diversity):
        bins = np.linspace(0.0, 1.0, 11)
        values = [diversity[f"{m}_coverage"].astype(float) for m in ("base", "tuned")]
        axes.hist(values, bins=bins, label=["base", "tuned"], color=[COLORS["base"], COLORS["tuned"]])
        axes.legend()
        axes.set_xlim(0, 1)
    else:
        axes.text(0.5, 0.5, "no diversity tasks", ha="center", va="center")
    axes.set_xlabel("coverage of the valid answer set (|answers ∩ V| / |V|)")
    axes.set_ylabel("tasks")
    axes.set_title("coverage per diversity task", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, format="png")


def answer_frequency_long(diversity: pd.DataFrame) -> pd.DataFrame:
    """Answer counts in long format: group_id, model, answer, count (valid answers given at least once)."""
    rows = [
        {"group_id": row["group_id"], "model": model, "answer": answer, "count": int(count)}
        for _, row in diversity.iterrows()
        for model in ("base", "tuned")
        for answer, count in json.loads(row[f"{model}_answer_counts"]).items()
    ]
    return pd.DataFrame(rows, columns=["group_id", "model", "answer", "count"])


def plot_answer_frequency(diversity: pd.DataFrame, path: Path, max_answers: int = 12) -> None:
    """Small multiples: per task, count of each valid answer (the most frequent `max_answers`)."""
    tasks = list(diversity.itertuples(index=False)) if len(diversity) else []
    cols = min(3, max(1, len(tasks)))
    rows = max(1, math.ceil(len(tasks) / cols))
    figure = _figure(4.2 * cols, 2.8 * rows)
    if not tasks:
        figure.add_subplot().text(0.5, 0.5, "no diversity tasks", ha="center", va="center")
    for index, task in enumerate(tasks):
        axes = figure.add_subplot(rows, cols, index + 1)
        counts = {m: json.loads(getattr(task, f"{m}_answer_counts")) for m in ("base", "tuned")}
        answers = sorted(set(counts["base"]) | set(counts["tuned"]), key=lambda a: -(counts["base"].get(a, 0) + counts["tuned"].get(a, 0)))
        answers = answers[:max_answers]
        x = np.arange(len(answers))
        for offset, model in ((-0.2, "base"), (0.2, "tuned")):
            axes.bar(x + offset, [counts[model].get(a, 0) for a in answers], width=0.4, color=COLORS[model], label=model)
        axes.set_xticks(x, [a.split("|")[0][:12] for a in answers], rotation=45, ha="right", fontsize=7)
        axes.set_title(f"{task.group_id} (|V| = {task.n_valid_answers}, n = {task.n_samples})", fontsize=8)
        if not answers:
            axes.text(0.5, 0.5, "no valid answer", ha="center", va="center", transform=axes.transAxes, fontsize=8)
        if index == 0:
            axes.legend(fontsize=7)
    figure.suptitle("answer frequency per diversity task", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, format="png")


METRIC_DELTA_COLUMNS = ["metric", "delta", "ci_low", "ci_high", "q_bh", "significant"]


def _base_vs_tuned(comparisons: list[Comparison]) -> list[Comparison]:
    return [c for c in comparisons if c.family == "base_vs_tuned" and c.delta is not None]


def metric_deltas_frame(comparisons: list[Comparison]) -> pd.DataFrame:
    """One row per base-vs-tuned metric: delta = mean(tuned − base), its bootstrap CI
    [ci_low, ci_high], the Benjamini–Hochberg q-value and whether q < alpha (the variant-vs-variant
    family is left out: its rows repeat one metric name per model and axis)."""
    rows = [{k: getattr(c, k) for k in METRIC_DELTA_COLUMNS} for c in _base_vs_tuned(comparisons)]
    return pd.DataFrame(rows, columns=METRIC_DELTA_COLUMNS)


def better_direction(comparison: Comparison) -> Direction:
    """Which way of tuned − base is better for a comparison's metric (`metric_labels`; "context": neither)."""
    for key in (comparison.metric, f"mean_{comparison.metric}"):
        found = label(comparison.family, key)
        if found.definition:
            return found.better
    return "context"


# the words at the left and right ends of a delta panel's axis, by the metric's better direction
DIRECTION_ENDS: dict[str, tuple[str, str]] = {
    "lower": ("← better", "worse →"),
    "higher": ("← worse", "better →"),
    "closer to 0": ("← better toward 0", "better toward 0 →"),
    "context": ("", "no better direction"),
}


def plot_metric_deltas(comparisons: list[Comparison], path: Path) -> None:
    """tuned − base per metric with its bootstrap CI; filled marker: BH-significant; each panel says
    which side is better (`better_direction`)."""
    rows = _base_vs_tuned(comparisons)
    height = max(2.0, 0.55 * len(rows) + 1.0)
    figure = _figure(7.0, height)
    if not rows:
        figure.add_subplot().text(0.5, 0.5, "no comparisons", ha="center", va="center")
    for index, c in enumerate(rows):
        axes = figure.add_subplot(len(rows), 1, index + 1)
        low = c.delta if c.ci_low is None else c.ci_low
        high = c.delta if c.ci_high is None else c.ci_high
        axes.plot([low, high], [0, 0], color=COLORS["tuned"], linewidth=2)
        axes.plot([c.delta], [0], marker="o", color=COLORS["tuned"], markerfacecolor=COLORS["tuned"] if c.significant else "white")
        span = max(abs(low), abs(high)) * 1.2 or 1.0
        axes.axvline(0, color="grey", linestyle="--", linewidth=1)
        axes.set_xlim(-span, span)
        axes.set_yticks([])
        axes.tick_params(axis="x", labelsize=6)
        axes.set_ylabel(c.metric, rotation=0, ha="right", va="center", fontsize=7)
        left, right = DIRECTION_ENDS[better_direction(c)]
        axes.text(0.0, 1.05, left, transform=axes.transAxes, ha="left", va="bottom", fontsize=5, color="dimgrey")
        axes.text(1.0, 1.05, right, transform=axes.transAxes, ha="right", va="bottom", fontsize=5, color="dimgrey")
    figure.suptitle("tuned − base per metric, bootstrap CI (filled: significant after BH)", fontsize=9)
    figure.subplots_adjust(left=0.34, right=0.97, top=1 - 0.6 / height, bottom=0.35 / height, hspace=1.4)
    figure.savefig(path, format="png")
