"""May a registered version become the champion? Pure checks over its recorded version tags.

A version qualifies when its registration gates passed (tag ``gate.passed = true``) and, judged on
the metrics recorded at registration (``metric.*`` tags), it is not worse than the reigning
champion by more than the champion gates' margins (``gate.champion_*`` in params.yaml). The
reigning champion may have changed since the version was registered, hence the second check.
The tags are read through their one decoder, `components.contracts.version_tags.VersionTags`.
"""

from __future__ import annotations

from collections.abc import Mapping

from components.config import GateConfig
from components.contracts.version_tags import GATE_PASSED_TAG, VersionTags
from components.release.gate import CHAMPION_GATES, Champion, GateDecision, GateResult, judge


def _decoded(tags: VersionTags | Mapping[str, str]) -> VersionTags:
    return tags if isinstance(tags, VersionTags) else VersionTags.from_tags(tags)


def registration_gates(tags: VersionTags | Mapping[str, str]) -> GateResult:
    """The version's registration verdict: tag gate.passed must be 'true' (missing: not passed)."""
    record = _decoded(tags)
    if record.gate_passed is None:
        return GateResult("registration_gates", None, 1.0, False, f"registration_gates: no gate record (tag {GATE_PASSED_TAG} missing)")
    failed = record.failed_gates()
    passed = record.gate_passed
    detail = f" (failed: {', '.join(failed)})" if failed else ""
    return GateResult(
        "registration_gates", 1.0 if passed else 0.0, 1.0, passed,
        f"registration_gates: {'passed' if passed else 'failed'}{detail}",
    )  # fmt: skip


def promotion_check(tags: VersionTags | Mapping[str, str], champion: Champion | None, gate: GateConfig) -> GateDecision:
    """Registration verdict plus the champion gates re-run against the reigning champion."""
    record = _decoded(tags)
    metrics = record.metrics_tree()
    results = [registration_gates(record)]
    results += [judge(spec, metrics, gate, champion) for spec in CHAMPION_GATES.values()]
    return GateDecision(passed=all(r.passed for r in results), results=results)
