"""Model registry: registration gates (pure, over metrics.json) and MLflow register/promote."""

from components.registry.gate import GATES, GateDecision, GateResult, evaluate_gates

__all__ = ["GATES", "GateDecision", "GateResult", "evaluate_gates"]
