"""Evaluation of base vs tuned: metrics over texts, per-group records, paired tests and reports.

Pure functions over texts and numbers: no model, no MLflow, no Prefect. matplotlib is imported
only when a plot is drawn.
"""

from components.evaluation.metrics import (
    coverage,
    distance_to_uniform,
    distinct_answers,
    distinct_n,
    entropy_gap,
    mean_helpfulness,
    mean_words,
    validity,
    variant_entropies,
)
from components.evaluation.records import (
    CONSISTENCY_COLUMNS,
    DIVERSITY_COLUMNS,
    consistency_record,
    diversity_record,
    summarize,
)
from components.evaluation.report import ReportFiles, gap_long_format, render_markdown, write_report
from components.evaluation.statistics import PairedTest, paired_test

__all__ = [
    "CONSISTENCY_COLUMNS",
    "DIVERSITY_COLUMNS",
    "PairedTest",
    "ReportFiles",
    "consistency_record",
    "coverage",
    "distance_to_uniform",
    "distinct_answers",
    "distinct_n",
    "diversity_record",
    "entropy_gap",
    "gap_long_format",
    "mean_helpfulness",
    "mean_words",
    "paired_test",
    "render_markdown",
    "summarize",
    "validity",
    "variant_entropies",
    "write_report",
]
