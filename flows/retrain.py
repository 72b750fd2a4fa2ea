"""Prefect flow `retrain`: the stages of dvc.yaml in their dependency order (`flows.pipeline`):
prepare benchmarks -> build -> prepare model -> validate -> train -> evaluate -> gate/register.

Thin by design: each task runs one stage's step (`flows.steps`), the function its `groupwise <step>`
command calls. One MLflow parent run holds a child run per step. A failing validation stops the flow
before training; a refused gate registers nothing.

- One definition: dvc.yaml declares the stages, their deps, params and outs; this flow runs them and
  records each in DVC (`dvc commit`), and DVC's hashes decide when build and prepare-model are up to
  date (`flows.pipeline`: what is recorded, when, and when not).
- Retries: every task retries (`tracking.retries` times, `tracking.retry_delay_seconds` apart) on
  a *transient* fault only (`runs.is_transient`: tracking server unreachable, database locked);
  bad data or a failed gate fails at once. Registration is idempotent (see `steps.register`), so
  retrying it cannot add a second version. Each task has a time limit
  (`tracking.step_timeout_seconds`).
- State hooks: a failed, crashed or cancelled flow run closes its MLflow runs FAILED or KILLED
  (`close_runs_of_flow_run`), also where the stopped process could not.
- Artifacts: validation summary, evaluation summary (the report's summary.md) and metrics table,
  gate verdicts, and the run summary.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from components.config import Params, assignments_to_overrides, file_profile, load_params, with_overrides
from components.contracts.summary import EvaluationSummary, read_summary
from components.tracking import runs
from flows import pipeline, steps
from flows.steps import StepResult


def transient_fault(task, task_run, state) -> bool:
    """Prefect retry condition: retry only a fault that `runs.is_transient` recognises."""
    exc = state.data if isinstance(state.data, BaseException) else None
    return exc is not None and runs.is_transient(exc)


def _step_task(name: str, fn):
    # a stage's outputs are rewritten each run and recorded by DVC: never served from Prefect's cache
    return task(fn, name=name, cache_policy=NO_CACHE, retry_condition_fn=transient_fault)


STEP_TASKS = {step: _step_task(step, fn) for step, fn in steps.STEPS.items()}  # register is idempotent: safe to retry
open_parent_task = task(runs.start_parent_run, name="open-mlflow-run", cache_policy=NO_CACHE, retry_condition_fn=transient_fault)
close_parent_task = task(runs.end_parent_run, name="close-mlflow-run", cache_policy=NO_CACHE, retry_condition_fn=transient_fault)


@dataclass
class RetrainSummary:
    parent_run_id: str
    profile: str
    results: list[StepResult] = field(default_factory=list)
    dvc: str = ""  # what DVC recorded of the run (or why nothing)

    @property
    def registration(self) -> dict:
        return self.results[-1].metrics if self.results else {}

    def markdown(self) -> str:
        lines = [f"# groupwise retrain ({self.profile})", "", f"MLflow parent run: `{self.parent_run_id}`", ""]
        lines += ["| step | MLflow run | result |", "|---|---|---|"]
        lines += [f"| {r.step} | `{r.run_id}` | {r.summary} |" for r in self.results]
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


def _run(step: str, params: Params, parent: str, **options) -> StepResult:
    configured = STEP_TASKS[step].with_options(
        retries=params.tracking.retries,
        retry_delay_seconds=params.tracking.retry_delay_seconds,
        timeout_seconds=params.tracking.step_timeout(step),
    )
    return configured(params, parent, **options)


def as_in_params_file(params_path: Path, params: Params) -> bool:
    """Whether `params` are what params.yaml alone resolves to (its own `profile` key, no environment,
    no `-S`): only then can dvc.lock, which reads params.yaml, say what ran."""
    listed = load_params(params_path, file_profile(params_path))
    return listed.model_dump(mode="json") == params.model_dump(mode="json")


HEADLINE = ("base_mean_gap", "tuned_mean_gap", "relative_gap_reduction", "q_value", "base_helpfulness", "tuned_helpfulness",
            "base_words", "tuned_words", "base_compliance", "tuned_compliance")  # fmt: skip


def headline_metrics(evaluation) -> dict[str, float]:
    """The figures a retrain is judged by, for the parent run (the runs table compares retrains by them)."""
    c = evaluation.consistency
    return {f"headline.{name}": getattr(c, name) for name in HEADLINE if getattr(c, name, None) is not None}


def _run_stage(step: str, params: Params, parent: str, resume: bool) -> StepResult:
    """One stage's step as a task, with what the flow shows of it (Prefect artifacts, the parent's metrics)."""
    if step == "validate":
        try:
            return _run(step, params, parent)
        finally:
            report = params.paths.validation / "report.json"
            if report.is_file():
                create_markdown_artifact(validation_markdown(report), key="validation-summary", description="GX validation")
    result = _run(step, params, parent, **({"resume": resume} if step == "train" else {}))
    if step == "evaluate":
        create_markdown_artifact(
            Path(result.outputs["summary"]).read_text(), key="evaluation-summary", description="base vs tuned, held-out"
        )
        evaluation = read_summary(Path(result.outputs["metrics"]))
        create_table_artifact(metrics_rows(evaluation), key="evaluation-metrics", description="base vs tuned, held-out")
        runs.log_metrics_to(parent, headline_metrics(evaluation))  # retrains compared in the runs table
    elif step == "register":
        runs.log_metrics_to(parent, {"gate.passed": float(bool(result.metrics["passed"]))})
        create_table_artifact(
            [{k: g[k] for k in ("name", "value", "threshold", "passed", "reason")} for g in result.metrics["gates"]],
            key="gate-verdicts",
            description=f"gates {'passed' if result.metrics['passed'] else 'failed'}",
        )
    return result


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


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    return str(flow_run.name or "run")


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

    def record(result: StepResult) -> None:
        summary.results.append(result)
        print(f"[{result.step}] {result.summary}")

    differ = (
        "this run's params differ from params.yaml's (--profile, -S or GROUPWISE_PROFILE); `dvc exp run -S key=value` records such a run"
    )
    try:
        recorded = as_in_params_file(Path(params_path), params)
        with pipeline.dvc_record(params.root) if recorded else nullcontext((None, differ)) as (dvc, why_not):
            if dvc is None:
                summary.dvc = f"not recorded in DVC: {why_not}"
                print(f"[dvc] {summary.dvc}")
            else:
                pipeline.check_declared(params.root, pipeline.user_files(params))
            for stage in pipeline.stages(params.root):
                record(_run_stage(stage.step, params, parent, resume))
                if dvc is not None:
                    dvc.commit(stage.name)
            if dvc is not None:
                saved = dvc.save_experiment(f"retrain-{_flow_run_name()}")
                summary.dvc = f"recorded in dvc.lock and DVC's cache (`dvc push` sends it); {saved}"
                print(f"[dvc] {summary.dvc}")
    except BaseException as exc:
        close_parent_task(parent, runs.stopped_status(exc))
        raise
    close_parent_task(parent, "FINISHED")
    create_markdown_artifact(summary.markdown(), key="retrain-summary", description="groupwise retrain")
    return summary
