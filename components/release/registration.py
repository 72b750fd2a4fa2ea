"""Gate, then register: the decision a `register` step takes and writes, in one function.

`gate_and_register` judges the evaluation's summary with the gates (against the base model and the
reigning @champion), writes the gate table and `decision.json` into the registry folder, and on a
pass registers the evaluated adapter (after `binding.check_evaluated`: what is registered is what
was evaluated) from the LoggedModel its training logged, and moves the alias; the verdict becomes
that LoggedModel's tags either way. Inside `dvc exp run` (DVC_EXP_NAME set) a pass registers
nothing unless `registry.register_experiments` says so: an experiment is compared with
`dvc exp show`, not promoted. Idempotent: the same adapter and metrics give the same version.
The caller owns the MLflow run the tags and metrics go to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.code_version import CodeVersion
from components.config import Params
from components.contracts.atomic import atomic_write_json
from components.contracts.summary import EvaluationSummary
from components.formatting import p_value, percent
from components.hashing import folder_files_sha256
from components.tracking import logged_model, runs

DECISION_FILE = "decision.json"


@dataclass
class Registration:
    outcome: dict[str, Any]  # decision.json
    line: str  # one line for the step's summary
    files: list[Path] = field(default_factory=list)  # decision.json, gates.csv, gates.md


def version_description(summary: EvaluationSummary, gates: int) -> str:
    """The registered version's description: its verdict and headline figures (MLflow's UI shows it
    on the version page)."""
    c = summary.consistency

    def pair(name: str, base: float | None, tuned: float | None, digits: int = 3) -> str:
        return f"{name} {base:.{digits}f} → {tuned:.{digits}f}" if base is not None and tuned is not None else f"{name} n/a"

    reduction = f" ({percent(c.relative_gap_reduction, signed=True)} reduction" if c.relative_gap_reduction is not None else " ("
    q = f", q {p_value(c.q_value)})" if c.q_value is not None else ")"
    return (
        f"Passed all {gates} gates. Held-out gap on {c.axis} {pair('', c.base_mean_gap, c.tuned_mean_gap).strip()}{reduction}{q}; "
        f"{pair('helpfulness', c.base_helpfulness, c.tuned_helpfulness)}; {pair('words per answer', c.base_words, c.tuned_words, 1)}; "
        f"{c.n_groups} groups. Full report: the evaluate run's evaluation/report.html."
    )


def _logged_model(params: Params, summary: EvaluationSummary, checkpoint: Path) -> str | None:
    """The LoggedModel the train step logged for the evaluated adapter, with this registry's
    packaging (None: the base model was evaluated, or no such model: registration logs one)."""
    from components.contracts.checkpoint import ADAPTER_DIR

    evaluated = summary.evaluated.adapter_sha256 if summary.evaluated is not None else None
    adapter = checkpoint / ADAPTER_DIR
    if evaluated is None or not adapter.is_dir() or folder_files_sha256(adapter) != evaluated:
        return None
    return logged_model.find_adapter_model(evaluated, params.registry.package_base_model)


def gate_and_register(params: Params, summary: EvaluationSummary, metrics_path: Path, checkpoint: Path) -> Registration:
    """Judge, write the verdict, and register the adapter in `checkpoint` when every gate passes."""
    from components.contracts.checkpoint import ADAPTER_DIR
    from components.release.binding import check_evaluated, registration_fingerprint, version_params, version_provenance
    from components.release.gate import evaluate_gates
    from components.release.gate_record import decision_outcome, registration_tags, run_metrics, run_tags, write_gate_table
    from components.tracking import model_registry

    reg = params.registry
    current_champion = model_registry.champion(reg.model_name, reg.champion_alias)
    decision = evaluate_gates(summary, params.gate, current_champion)
    outcome: dict[str, Any] = decision_outcome(decision, current_champion)
    runs.log_metrics(run_metrics(decision))
    runs.set_tags(run_tags(decision))
    model_id = _logged_model(params, summary, checkpoint)
    if model_id:  # the verdict on the LoggedModel, refused ones too
        logged_model.set_verdict(model_id, decision.passed, decision.reasons())
        runs.set_tags({"registry.model_id": model_id})
    table = write_gate_table(decision, params.paths.registry)
    experiment = os.environ.get("DVC_EXP_NAME")  # set by DVC inside `dvc exp run`
    if decision.passed and experiment and not reg.register_experiments:
        outcome["registered"] = False
        outcome["reasons"] = [f"DVC experiment {experiment!r}: gates judged, nothing registered "
                              "(an experiment is compared with `dvc exp show`, not promoted; "
                              "registry.register_experiments: true registers it)"]  # fmt: skip
        runs.set_tags({"registry.skipped": "dvc experiment"})
        line = f"gates passed; not registered: {outcome['reasons'][0]}"
    elif decision.passed:
        adapter = checkpoint / ADAPTER_DIR
        check_evaluated(params, summary, metrics_path, adapter)  # publishes what was evaluated, or nothing
        version = model_registry.register_adapter(
            adapter,
            params.paths.base_model,
            reg.model_name,
            reg.alias,
            registration_tags(
                decision,
                current_champion,
                summary,
                version_provenance(params, CodeVersion.from_dict(summary.code and summary.code.to_dict())),
                version_params(params),
            ),
            dtype=params.model.dtype,
            package_base_model=reg.package_base_model,
            fingerprint=registration_fingerprint(adapter, metrics_path),
            lock_timeout=reg.lock_timeout_seconds,
            description=version_description(summary, len(decision.results)),
            model_id=model_id,
        )
        runs.set_tags({"registry.version": version.version, "registry.reused": str(version.reused).lower()})
        outcome.update(version.outcome())
        line = version.describe()
    else:
        outcome["reasons"] = decision.reasons()
        line = "gate refused, nothing registered: " + "; ".join(decision.reasons())
    decision_path = atomic_write_json(params.paths.registry / DECISION_FILE, outcome)
    return Registration(outcome, line, [decision_path, *table])


__all__ = ["DECISION_FILE", "Registration", "gate_and_register"]
