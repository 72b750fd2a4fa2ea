"""Model registry policy: registration gates and promotion checks (pure, no MLflow here)."""

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
