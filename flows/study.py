"""`groupwise study [--study NAME]`: a study, arm after arm, resumable, one MLflow run per arm.

The study domain (what an arm is, its params, when it is done) is `components.study.domain`; its
report, `components.study.reports`. This flow runs the shared steps once (benchmarks, groups, model,
validation), then each arm not done yet: trains it (resuming from its newest state), evaluates it,
copies its results to results/<study>/arms/<arm>/ and rewrites the study's report. Arms never touch
the model registry. MLflow: a `study` run, a child run per arm, the steps' runs under each arm; the
learning-curve arm also evaluates its `train.snapshot_every` adapters.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from components.code_version import code_version
from components.config import PREREGISTERED_REPORTS, Params, ParamsError
from components.contracts.checkpoint import CheckpointLayout, latest_train_state, read_state
from components.contracts.errors import UserError
from components.contracts.summary import SUMMARY_FILE
from components.machine import machine_record
from components.study.arm_code import check_pooled_code, pooled_arm_codes
from components.study.domain import (
    ARM_FILE,
    Study,
    arm_done,
    arm_fingerprint,
    arm_params,
    built_groups_sha256,
    curve_pending,
    load_study,
    pick_arms,
    study_params,
    trained,
    write_results,
)
from components.study.report import CURVE_COLUMNS, CURVE_FILE, curve_rows, untrained
from components.study.reports import report_files, write_study_report
from components.tracking import runs
from flows import steps


def learning_curve(params: Params, study: Study, name: str, parent: str) -> None:
    """Evaluate the arm's snapshot adapters not yet in results/consistency/arms/<arm>/learning_curve.csv (base
    samples drawn once, the engine started once), appending each point as it is done; the step-0
    (base) and final rows come from the arm's own evaluation."""
    from components.contracts.summary import read_summary
    from components.data import load_groups
    from components.evaluation.run import evaluate_snapshots

    layout = CheckpointLayout(params.paths.checkpoints)
    path = study.arm_dir(name) / CURVE_FILE
    final_gap = read_summary(study.arm_dir(name) / SUMMARY_FILE).consistency
    final = read_state(layout.latest)
    ends = curve_rows(name, 0, 0, untrained(final_gap)) + curve_rows(name, int(final["steps"]), int(final["samples"]), final_gap)
    done = pd.read_csv(path) if path.is_file() else pd.DataFrame(ends, columns=CURVE_COLUMNS)
    done.to_csv(path, index=False)
    todo = [s for s in layout.snapshot_dirs() if int(read_state(s)["steps"]) not in set(done["step"])]
    if not todo:
        return
    for checkpoint, summary in evaluate_snapshots(params, load_groups(params.paths.groups), todo):
        state = read_state(checkpoint)
        with runs.step_run(params.tracking, f"curve-step-{state['steps']}", {"checkpoint": str(checkpoint)}, parent):
            runs.log_metrics(summary.to_dict(), prefix="eval.")
        rows = curve_rows(name, int(state["steps"]), int(state["samples"]), summary.consistency)
        done = pd.concat([done, pd.DataFrame(rows, columns=CURVE_COLUMNS)], ignore_index=True).sort_values(["step", "scope"])
        done.to_csv(path, index=False)
        print(f"[study/{name}] learning curve: step {state['steps']}, tuned gap {summary.consistency.tuned_mean_gap:.4f}")


NPROC_ENV = "GROUPWISE_STUDY_NPROC_PER_NODE"  # > 1: an arm trains on that many processes (torchrun)


def train_arm(params: Params, study: Study, name: str, parent: str, resume: bool) -> None:
    """Train the arm here, or with $GROUPWISE_STUDY_NPROC_PER_NODE = N > 1 on N processes of this
    machine (`torchrun --standalone`, `flows.study_train`: DDP as `groupwise train` under torchrun)."""
    raw = os.environ.get(NPROC_ENV, "").strip() or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise ParamsError(f"{NPROC_ENV}={raw!r}: processes per node, a whole number >= 1")
    if int(raw) == 1:
        steps.train(params, parent, resume=resume)
        return
    if study.params_file is None:
        raise ParamsError(f"{NPROC_ENV}: the study's params file is not known (load it with load_study)")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", raw, "-m", "flows.study_train",
            str(study.params_file), study.name, name, parent or "", *(["--resume"] if resume else [])]  # fmt: skip
    print(f"[{study.folder}/{name}] {' '.join(argv[1:])}")
    done = subprocess.run(argv, cwd=params.root)
    if done.returncode != 0:
        raise RuntimeError(f"[{study.folder}/{name}] torchrun training exited with {done.returncode}")


def restore_start_adapter(params: Params, study: Study, name: str, parent: str) -> None:
    """Before training an arm that starts from another arm's adapter (`start_from`): if that arm is
    finished but its adapter is not here (a fresh clone: results are committed, adapters are not),
    train it again from its params (seeded: the same run; its results stand). A start arm that is
    not finished is left to the arm order, which runs it first."""
    start = study.config.arms[name].start_from
    if start is None:
        return
    start_params = arm_params(params, study, start)
    start_kind = study.config.arms[start].kind
    if trained(start_params) or not arm_done(study, start, arm_fingerprint(start_params, start_kind), built_groups_sha256(start_params)):
        return
    layout = CheckpointLayout(start_params.paths.checkpoints)
    resume = latest_train_state(layout.resume) is not None
    print(f"[{study.folder}/{name}] starts from {start}, whose adapter is not here: training {start} again (its results stand)")
    train_arm(start_params, study, start, parent, resume)


class DirtyTreeError(UserError, RuntimeError):
    """A pre-registered study asked to run on code with uncommitted changes."""


def check_code_for(chosen_study: Study) -> None:
    """Before any arm runs: a confirmation (`PREREGISTERED_REPORTS`) runs committed code only, so that each
    arm's record names code anyone can check out (DirtyTreeError naming the study file otherwise), and
    this code must be one the report may pool with the finished arms, those of its pooled studies included
    (`arm_code.check_pooled_code`)."""
    code = code_version()
    study_file = f"studies/{chosen_study.name}.yaml"
    if chosen_study.config.report in PREREGISTERED_REPORTS and code.dirty:
        raise DirtyTreeError(
            f"{study_file}: a pre-registered confirmation runs committed code only, and the code at "
            f"{code.commit[:12]} has uncommitted changes (diff {code.diff_sha256[:12]}): commit or stash them, then run it again"
        )
    finished = pooled_arm_codes(chosen_study.pooled_layouts)
    check_pooled_code(study_file, finished | {"this run": code}, chosen_study.config.code_differences)


@task(name="study-arm", cache_policy=NO_CACHE)
def run_arm(params: Params, study: Study, name: str, parent: str) -> dict:
    """Train (train arms) and evaluate one arm; its results go to results/<study>/arms/<name>/ at once, then
    the learning curve (the learning-curve arm) is added point by point."""
    layout = CheckpointLayout(params.paths.checkpoints)
    arm = study.config.arms[name]
    out = study.arm_dir(name)
    arm_run = runs.start_parent_run(params.tracking, f"{study.folder}/{name}", {"groupwise.study_arm": name}, parent_run_id=parent)
    record = {"name": name, "kind": arm.kind, "description": arm.description, "overrides": arm.overrides,
              "fingerprint": arm_fingerprint(params, arm.kind), "groups_sha256": built_groups_sha256(params), "mlflow_run_id": arm_run,
              "machine": machine_record(), "family": arm.family, "start_from": arm.start_from,
              "code": code_version().to_dict()}  # fmt: skip
    try:
        if not arm_done(study, name, record["fingerprint"], record["groups_sha256"]):
            if arm.kind == "train":
                started = time.perf_counter()
                if not trained(params):
                    resume = latest_train_state(layout.resume) is not None
                    print(f"[study/{name}] training{' (resuming)' if resume else ''}: {params.train.steps} steps")
                    train_arm(params, study, name, arm_run, resume)
                state = read_state(layout.latest)
                record.update(train_samples=state["samples"], train_seconds=state["seconds"], train_steps=state["steps"],
                              train_wall_seconds_this_run=time.perf_counter() - started)  # fmt: skip
            started = time.perf_counter()
            evaluated = steps.evaluate(params, arm_run)
            record["eval_seconds"] = time.perf_counter() - started
            print(f"[study/{name}] {evaluated.summary}")
            record["eval_time"] = evaluated.time  # the evaluation's phases: where an arm's evaluation time goes
            print(f"[study/{name}] evaluation {record['eval_seconds']:.0f} s, {evaluated.time}")
            write_results(params, record, out)
        if curve_pending(params, study, name):
            learning_curve(params, study, name, arm_run)
    except BaseException as exc:
        runs.end_parent_run(arm_run, runs.stopped_status(exc))
        raise
    runs.end_parent_run(arm_run, "FINISHED")
    return record


@flow(name="study", log_prints=True)
def study(params_path: str = "params.yaml", arms: list[str] | None = None, name: str | None = None) -> Path:
    """Run the study's arms (all, or `arms`) in order, skipping finished ones; write the report."""
    params, chosen_study = load_study(params_path, name)
    config = chosen_study.config
    chosen = pick_arms(chosen_study, arms)
    check_code_for(chosen_study)
    parent = runs.start_parent_run(params.tracking, "study", {"groupwise.profile": params.profile, "groupwise.study": chosen_study.name})
    try:
        shared = study_params(params, chosen_study)  # what every arm's groups are built and checked with
        for step in (steps.prepare_benchmarks, steps.build, steps.prepare_model, steps.validate):
            print(f"[study] {step(shared, parent).summary}")
        for arm_name in chosen:
            arm = arm_params(params, chosen_study, arm_name)
            if arm_done(
                chosen_study, arm_name, arm_fingerprint(arm, config.arms[arm_name].kind), built_groups_sha256(arm)
            ) and not curve_pending(arm, chosen_study, arm_name):
                print(
                    f"[{chosen_study.folder}/{arm_name}] done earlier ({chosen_study.arm_dir(arm_name) / ARM_FILE} matches its params): skipped"
                )
                continue
            if config.arms[arm_name].kind == "train" and not trained(arm):
                restore_start_adapter(params, chosen_study, arm_name, parent)
            run_arm(arm, chosen_study, arm_name, parent)
            write_study_report(chosen_study)
        path = write_study_report(chosen_study)
        runs.log_files_to(parent, report_files(chosen_study), "study")  # the report on the study's MLflow run
        runs.end_parent_run(parent, "FINISHED")
    except BaseException as exc:
        runs.end_parent_run(parent, runs.stopped_status(exc))
        raise
    print(f"[study] {path}")
    return path
