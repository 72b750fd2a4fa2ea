"""Prefect flow `retrain`: build -> prepare model -> validate -> prepare benchmarks -> train ->
evaluate -> gate/register.

Thin by design: each task calls one step of `flows.steps`. One MLflow parent run holds a child run
per step. A failing validation stops the flow before training; a refused gate registers nothing.

- Retries: every task retries (`tracking.retries` times, `tracking.retry_delay_seconds` apart) on
  a *transient* fault only (`runs.is_transient`: tracking server unreachable, database locked);
  bad data or a failed gate fails at once. Registration is idempotent (see `steps.register`), so
  retrying it cannot add a second version.
- Caching (`flows.caching`): build and prepare-model are served from Prefect's cache
  when their inputs (params sections, source files, templates) are unchanged *and* their output
  folders are as the last run left them; a DVC run that deleted or rewrote them forces a rebuild.
  Train/evaluate/register are never cached (costly to key, and their outputs are DVC outs).
- Artifacts: validation summary, evaluation summary (the report's summary.md) and metrics table,
  gate verdicts, and the run summary.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from components.config import Params, assignments_to_overrides, load_params, with_overrides
from components.contracts.summary import EvaluationSummary, read_summary
from components.tracking import runs
from flows import caching, steps
from flows.steps import StepResult


def transient_fault(task, task_run, state) -> bool:
    """Prefect retry condition: retry only a fault that `runs.is_transient` recognises."""
    exc = state.data if isinstance(state.data, BaseException) else None
    return exc is not None and runs.is_transient(exc)


def _step_task(name: str, fn):
    # DVC outputs are rewritten each run: never served from a cache (DVC deletes outs before a stage runs).
    return task(fn, name=name, cache_policy=NO_CACHE, retry_condition_fn=transient_fault)


def _cached_task(name: str, step: str):
    """A task whose result (a plain dict, JSON-persisted: no pickle) is cached on the step's inputs."""

    def run_step(params: Params, parent_run_id: str | None = None) -> dict:
        return asdict(steps.STEPS[step](params, parent_run_id))

    run_step.__name__ = run_step.__qualname__ = f"run_{step.replace('-', '_')}"
    return task(
        run_step,
        name=name,
        cache_key_fn=caching.cache_key_fn(step),
        persist_result=True,
        result_serializer="json",
        retry_condition_fn=transient_fault,
    )


build_task = _cached_task("build", "build")
validate_task = _step_task("validate", steps.validate)
prepare_model_task = _cached_task("prepare-model", "prepare-model")
prepare_benchmarks_task = _step_task("prepare-benchmarks", steps.prepare_benchmarks)  # idempotent: checks hashes, fetches once
train_task = _step_task("train", steps.train)
evaluate_task = _step_task("evaluate", steps.evaluate)
register_task = _step_task("register", steps.register)  # idempotent: safe to retry
open_parent_task = task(runs.start_parent_run, name="open-mlflow-run", cache_policy=NO_CACHE, retry_condition_fn=transient_fault)
close_parent_task = task(runs.end_parent_run, name="close-mlflow-run", cache_policy=NO_CACHE, retry_condition_fn=transient_fault)


@dataclass
class RetrainSummary:
    parent_run_id: str
    profile: str
    results: list[StepResult] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)  # steps served from Prefect's cache

    @property
    def registration(self) -> dict:
        return self.results[-1].metrics if self.results else {}

    def markdown(self) -> str:
        lines = [f"# groupwise retrain ({self.profile})", "", f"MLflow parent run: `{self.parent_run_id}`", ""]
        lines += ["| step | MLflow run | result |", "|---|---|---|"]
        lines += [f"| {r.step} | `{r.run_id}` | {'(cached) ' if r.step in self.cached else ''}{r.summary} |" for r in self.results]
        return "\n".join(lines)


def validation_markdown(report_path: Path) -> str:
    """The GX report as a short markdown summary: files, groups, and each rule's verdict."""
    report = json.loads(Path(report_path).read_text())
    lines = [f"# Validation: {'passed' if report.get('success') else 'FAILED'}", ""]
    lines += ["| file | groups | members |", "|---|---|---|"]
    for name, counts in report.get("files", {}).items():
        lines.append(f"| {Path(name).name} | {counts.get('groups', '?')} | {counts.get('members', '?')} |")
    lines += ["", "| rule | file | verdict | offending rows |", "|---|---|---|---|"]
    for rule in report.get("rules", []):
        rows = rule.get("offending_rows") or []
        lines.append(
            f"| {rule.get('rule')} | {Path(str(rule.get('file', ''))).name} | {'pass' if rule.get('success') else 'FAIL'} | {len(rows)} |"
        )
    return "\n".join(lines)


def metrics_rows(summary: EvaluationSummary) -> list[dict]:
    """metrics.json as table rows: base/tuned pairs side by side (`base_<m>` / `tuned_<m>` fields of
    a section), other scalars alone."""
    rows = []
    for section, values in summary.to_dict().items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if key.startswith("tuned_") and f"base_{key[6:]}" in values:
                continue  # shown in its base_ row
            if key.startswith("base_"):
                rows.append({"metric": f"{section}.{key[5:]}", "base": value, "tuned": values.get(f"tuned_{key[5:]}")})
            elif isinstance(value, (int, float, bool)) or value is None:
                rows.append({"metric": f"{section}.{key}", "base": None, "tuned": value})
    return rows


def _run(step_task, params: Params, parent: str, **options):
    configured = step_task.with_options(
        retries=params.tracking.retries,
        retry_delay_seconds=params.tracking.retry_delay_seconds,
        timeout_seconds=params.tracking.step_timeout(step_task.name),
    )
    return configured(params, parent, **options)


def _run_cached(step_task, step: str, params: Params, parent: str) -> tuple[StepResult, bool]:
    """Run a cached step; force a fresh run when its outputs are not what the last run left."""
    intact = caching.outputs_intact(step, params)
    configured = step_task.with_options(
        retries=params.tracking.retries,
        retry_delay_seconds=params.tracking.retry_delay_seconds,
        timeout_seconds=params.tracking.step_timeout(step),
        refresh_cache=not intact,
    )
    state = configured(params, parent, return_state=True)
    result = StepResult(**state.result())
    caching.record_outputs(step, params)
    return result, state.name == "Cached"


HEADLINE = ("base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "q_value", "base_helpfulness", "tuned_helpfulness",
            "base_words", "tuned_words", "base_compliance", "tuned_compliance")  # fmt: skip


def headline_metrics(evaluation) -> dict[str, float]:
    """The figures a retrain is judged by, for the parent run (the runs table compares retrains by them)."""
    c = evaluation.consistency
    return {f"headline.{name}": getattr(c, name) for name in HEADLINE if getattr(c, name, None) is not None}


FLOW_RUN_TAG = "groupwise.prefect.flow_run_id"  # on the parent run: the Prefect flow run it belongs to
PARENT_EXCLUDED = ("study", "studies")  # the parent logs every other resolved section (studies have their own runs)


def close_runs_of_flow_run(flow, flow_run, state) -> None:
    """Prefect state hook (on_failure, on_crashed, on_cancellation): the moment a retrain fails, crashes
    or is cancelled, its MLflow parent run and every child still RUNNING are closed, FAILED or KILLED
    (cancelled). It runs where Prefect runs hooks (the flow's process; for a cancelled or crashed
    deployment run, the worker or runner that stopped it) and finds the runs by the flow run's id, so
    it needs nothing from the stopped process."""
    parameters = dict(flow_run.parameters or {})
    try:
        params = load_params(Path(parameters.get("params_path") or "params.yaml"), parameters.get("profile"))
    except Exception as exc:  # a hook must not raise: say why nothing was closed
        print(f"[tracking] the MLflow runs of flow run {flow_run.id} were not closed: {exc}")
        return
    status = "KILLED" if state.is_cancelling() or state.is_cancelled() else "FAILED"
    closed = runs.close_runs_tagged(params.tracking, FLOW_RUN_TAG, str(flow_run.id), status, f"Prefect flow run {state.name}")
    if closed:
        print(f"[tracking] flow run {flow_run.name} {state.name}: {len(closed)} MLflow run(s) marked {status}")


def _flow_run_id() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.id or "")


@flow(
    name="retrain",
    log_prints=True,
    on_failure=[close_runs_of_flow_run],
    on_crashed=[close_runs_of_flow_run],
    on_cancellation=[close_runs_of_flow_run],
)
def retrain(
    params_path: str = "params.yaml", profile: str | None = None, overrides: list[str] | None = None, resume: bool = False
) -> RetrainSummary:
    """Every step in order; `overrides` are `-S` assignments ("train.lr=5e-5"), applied over the profile
    (a deployment's parameter: a scheduled or triggered run can vary a knob). `resume`: training continues
    from the state a stopped run saved (`groupwise retrain --resume` after a SIGTERM)."""
    params: Params = load_params(Path(params_path), profile)
    if overrides:
        params = with_overrides(params, assignments_to_overrides(list(overrides)))
    configured = open_parent_task.with_options(retries=params.tracking.retries, retry_delay_seconds=params.tracking.retry_delay_seconds)
    parent = configured(params.tracking, "retrain", tags={"groupwise.profile": params.profile, FLOW_RUN_TAG: _flow_run_id()})
    summary = RetrainSummary(parent, params.profile)
    runs.log_params_to(parent, params.model_dump(mode="json", exclude=set(PARENT_EXCLUDED)))  # retrains compared by any knob

    def record(result: StepResult, cached: bool = False) -> None:
        summary.results.append(result)
        if cached:
            summary.cached.append(result.step)
        print(f"[{result.step}] {'(cached) ' if cached else ''}{result.summary}")

    try:
        record(_run(prepare_benchmarks_task, params, parent))  # first: decision groups (data.decision_groups) are built from it
        record(*_run_cached(build_task, "build", params, parent))
        record(*_run_cached(prepare_model_task, "prepare-model", params, parent))  # its tokenizer checks the prompts
        try:
            record(_run(validate_task, params, parent))
        finally:
            report = params.paths.validation / "report.json"
            if report.is_file():
                create_markdown_artifact(validation_markdown(report), key="validation-summary", description="GX validation")
        record(_run(train_task, params, parent, resume=resume))
        evaluated = _run(evaluate_task, params, parent)
        record(evaluated)
        create_markdown_artifact(
            Path(evaluated.outputs["summary"]).read_text(), key="evaluation-summary", description="base vs tuned, held-out"
        )
        evaluation = read_summary(Path(evaluated.outputs["metrics"]))
        create_table_artifact(metrics_rows(evaluation), key="evaluation-metrics", description="base vs tuned, held-out")
        runs.log_metrics_to(parent, headline_metrics(evaluation))  # retrains compared in the runs table
        registered = _run(register_task, params, parent)
        record(registered)
        runs.log_metrics_to(parent, {"gate.passed": float(bool(registered.metrics["passed"]))})
        create_table_artifact(
            [{k: g[k] for k in ("name", "value", "threshold", "passed", "reason")} for g in registered.metrics["gates"]],
            key="gate-verdicts",
            description=f"gates {'passed' if registered.metrics['passed'] else 'failed'}",
        )
    except BaseException as exc:
        close_parent_task(parent, runs.stopped_status(exc))
        raise
    close_parent_task(parent, "FINISHED")
    create_markdown_artifact(summary.markdown(), key="retrain-summary", description="groupwise retrain")
    return summary
