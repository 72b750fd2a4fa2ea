"""Fairness benchmarks scored in every evaluation (`eval.fairness.benchmarks`): the registry and
the benchmarks that register themselves on import (DiscrimEval, BBQ)."""

from components.fairness_benchmarks import bbq, discrim_eval  # noqa: F401  (register themselves)
from components.fairness_benchmarks.base import (
    BENCHMARKS,
    BenchmarkDataError,
    ChoiceBenchmark,
    DecisionBenchmark,
    register_benchmark,
    score_key,
)

__all__ = ["BENCHMARKS", "BenchmarkDataError", "ChoiceBenchmark", "DecisionBenchmark", "register_benchmark", "score_key"]
