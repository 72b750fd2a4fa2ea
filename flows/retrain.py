"""Prefect flow `retrain`: build -> validate -> prepare model -> train -> evaluate -> gate/register.

Thin by design: each task calls one step of `flows.steps`. One MLflow parent run holds a child run
per step. A failing validation stops the flow before training; a refused gate registers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from components.config import Params, load_params
from components.tracking import runs
from flows import steps
from flows.steps import StepResult


def _step_task(name: str, fn):
    # DVC-style outputs are rewritten each run: never served from a cache (see STACK_NOTES).
    return task(fn, name=name, cache_policy=NO_CACHE)


build_task = _step_task("build-groups", steps.build)
validate_task = _step_task("validate-groups", steps.validate)
prepare_model_task = _step_task("prepare-base-model", steps.prepare_model)
train_task = _step_task("train-grpo", steps.train)
evaluate_task = _step_task("evaluate", steps.evaluate)
# no retries: registration is not idempotent (a retry after log_model would add a second version)
register_task = _step_task("gate-and-register", steps.register)


@dataclass
class RetrainSummary:
    parent_run_id: str
    profile: str
    results: list[StepResult] = field(default_factory=list)

    @property
    def registration(self) -> dict:
        return self.results[-1].metrics if self.results else {}

    def markdown(self) -> str:
        lines = [f"# groupwise retrain ({self.profile})", "", f"MLflow parent run: `{self.parent_run_id}`", ""]
        lines += ["| step | MLflow run | result |", "|---|---|---|"]
        lines += [f"| {r.step} | `{r.run_id}` | {r.summary} |" for r in self.results]
        return "\n".join(lines)


@flow(name="retrain", log_prints=True)
def retrain(params_path: str = "params.yaml", profile: str | None = None) -> RetrainSummary:
    params: Params = load_params(Path(params_path), profile)
    parent = runs.start_parent_run(params.tracking, "retrain", tags={"groupwise.profile": params.profile})
    summary = RetrainSummary(parent, params.profile)
    try:
        for step_task in (build_task, validate_task, prepare_model_task, train_task, evaluate_task, register_task):
            result = step_task(params, parent)
            summary.results.append(result)
            print(f"[{result.step}] {result.summary}")
    except BaseException:
        runs.end_parent_run(parent, "FAILED")
        raise
    runs.end_parent_run(parent, "FINISHED")
    create_markdown_artifact(summary.markdown(), key="retrain-summary", description="groupwise retrain")
    return summary
