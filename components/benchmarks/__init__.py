"""Decision benchmarks scored in every evaluation (`eval.fairness.benchmarks`): the registry and
the benchmarks that register themselves on import (DiscrimEval)."""

from components.benchmarks import discrim_eval  # noqa: F401  (registers itself)
from components.benchmarks.base import (
    BENCHMARKS,
    BenchmarkDataError,
    DecisionBenchmark,
    register_benchmark,
    score_key,
)

__all__ = ["BENCHMARKS", "BenchmarkDataError", "DecisionBenchmark", "register_benchmark", "score_key"]
