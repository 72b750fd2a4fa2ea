"""May a registered version become the champion? Pure checks over its recorded version tags.

A version qualifies when its registration gates passed (tag ``gate.passed = true``) and, judged on
the metrics recorded at registration (``metric.*`` tags), it is not worse than the reigning
champion by more than the champion gates' margins (``gate.champion_*`` in params.yaml). The
reigning champion may have changed since the version was registered, hence the second check.
"""

from __future__ import annotations

from components.config import GateConfig
from components.registry.gate import CHAMPION_GATES, Champion, GateDecision, GateResult, metrics_from_tags


def registration_gates(tags: dict[str, str]) -> GateResult:
    """The version's registration verdict: tag gate.passed must be 'true' (missing: not passed)."""
    verdict = tags.get("gate.passed")
    if verdict is None:
        return GateResult("registration_gates", None, 1.0, False, "registration_gates: no gate record (tag gate.passed missing)")
    failed = sorted(k.split(".", 1)[1] for k, v in tags.items() if k.startswith("gate.") and v == "fail")
    passed = verdict.lower() == "true"
    detail = f" (failed: {', '.join(failed)})" if failed else ""
    return GateResult(
        "registration_gates", 1.0 if passed else 0.0, 1.0, passed,
        f"registration_gates: {'passed' if passed else 'failed'}{detail}",
    )  # fmt: skip


def promotion_check(tags: dict[str, str], champion: Champion | None, gate: GateConfig) -> GateDecision:
    """Registration verdict plus the champion gates re-run against the reigning champion."""
    metrics = metrics_from_tags(tags)
    results = [registration_gates(tags)]
    results += [check(metrics, gate, champion) for check in CHAMPION_GATES.values()]
    return GateDecision(passed=all(r.passed for r in results), results=results)
