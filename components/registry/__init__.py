"""Model registry policy: the registration gates, promotion checks, what binds a registered version to its
evaluation, and `gate_and_register` (which registers through `components.tracking.model_registry`, the one
place that talks to the MLflow Model Registry; gates and promotion checks themselves are pure)."""

from components.registry.gate import (
    CHAMPION_GATES,
    GATES,
    Champion,
    GateDecision,
    GateResult,
    evaluate_gates,
    metrics_from_tags,
    metrics_to_tags,
)

__all__ = [
    "CHAMPION_GATES",
    "GATES",
    "Champion",
    "GateDecision",
    "GateResult",
    "evaluate_gates",
    "metrics_from_tags",
    "metrics_to_tags",
]
