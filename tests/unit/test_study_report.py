"""The study report: which H_norm an arm was scored with, and learning curves of several arms."""

from __future__ import annotations

import pandas as pd

from components.contracts.summary import HelpfulnessDefinition
from components.study.report import CURVE_COLUMNS, helpfulness_label, plot_learning_curve, render_markdown


def test_helpfulness_label_reads_metrics_then_overrides_then_the_old_default():
    assert helpfulness_label(HelpfulnessDefinition(scope="window", max_words=32), {}) == "window/32"
    arm = {"overrides": {"reward": {"entropy_scope": "answer", "entropy_max_words": 64}}}
    assert helpfulness_label(None, arm) == "answer/64"
    # evaluations from before reward.entropy_scope: whole answers, W_max not recorded
    assert helpfulness_label(None, {"overrides": {"train": {"steps": 3}}}) == "answer/?"


def _row(arm: str, step: int, scope: str, gap: float) -> dict:
    return dict(zip(CURVE_COLUMNS, (arm, step, step * 30, scope, 0.2, gap, -0.1, 0.0, 0.01)))


def test_curve_of_two_arms_is_tabled_per_arm_and_plotted(tmp_path):
    curve = pd.DataFrame([_row("grpo", 0, "overall", 0.2), _row("grpo", 20, "overall", 0.15),
                          _row("old", 0, "overall", 0.2), _row("old", 20, "overall", 0.05)])  # fmt: skip
    text = render_markdown(pd.DataFrame(), curve, {}, "groupwise study", [])
    assert "| grpo | 20 | 600 | overall | 0.150 |" in text
    assert "| old | 20 | 600 | overall | 0.050 |" in text
    plot_learning_curve(curve, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000
