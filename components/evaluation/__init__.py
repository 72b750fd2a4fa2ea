"""Evaluation of base vs tuned: metrics over texts, per-group records, paired tests and the summary
(`components.reporting` draws them).

`run.evaluate_models` samples both models through a generation engine (`components.generation`);
everything else is pure functions over texts, embeddings and numbers: no MLflow, no Prefect.
matplotlib is imported only when a plot is drawn.
"""

from components.evaluation.comparisons import compare_all, comparisons_frame
from components.evaluation.metrics import (
    answer_distribution,
    coverage,
    cross_variant_cosine,
    distance_to_uniform,
    distinct_answers,
    distinct_n,
    empty_rate,
    entropy_gap,
    js_distance_to_uniform,
    kl_to_uniform,
    mean_helpfulness,
    mean_words,
    n_clusters,
    self_bleu,
    semantic_agreement,
    semantic_entropy,
    unique_at_n,
    validity,
    variant_entropies,
    vendi_score,
)
from components.evaluation.records import (
    CONSISTENCY_COLUMNS,
    DIVERSITY_COLUMNS,
    Semantics,
    consistency_record,
    diversity_record,
)
from components.evaluation.statistics import (
    Comparison,
    PairedTest,
    benjamini_hochberg,
    bootstrap_ci,
    paired_test,
)
from components.evaluation.summary import summarize

__all__ = [
    "CONSISTENCY_COLUMNS", "DIVERSITY_COLUMNS", "Comparison", "PairedTest", "Semantics",
    "answer_distribution", "benjamini_hochberg", "bootstrap_ci", "compare_all", "comparisons_frame",
    "consistency_record", "coverage", "cross_variant_cosine", "distance_to_uniform", "distinct_answers",
    "distinct_n", "diversity_record", "empty_rate", "entropy_gap",
    "js_distance_to_uniform", "kl_to_uniform", "mean_helpfulness", "mean_words", "n_clusters",
    "paired_test", "self_bleu", "semantic_agreement", "semantic_entropy", "summarize",
    "unique_at_n", "validity", "variant_entropies", "vendi_score",
]  # fmt: skip
