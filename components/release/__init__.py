"""Release policy: which model versions may be released, and how. The registration gates (`gate`; `gate_record` writes their verdict),
promotion checks (`promotion`), what binds a registered version to its evaluation (`binding`), and
`gate_and_register` (`registration`), which registers through `components.tracking.model_registry`,
the one place that talks to the MLflow Model Registry; gates and promotion checks themselves are
pure. (Name lookups of pluggable pieces, such as `rewards.registry`, are `contracts.naming`.)"""

from components.release.gate import (
    CHAMPION_GATES,
    GATES,
    Champion,
    GateDecision,
    GateResult,
    evaluate_gates,
)

__all__ = [
    "CHAMPION_GATES",
    "GATES",
    "Champion",
    "GateDecision",
    "GateResult",
    "evaluate_gates",
]
