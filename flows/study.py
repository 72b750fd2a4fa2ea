"""`groupwise study [--study NAME]`: a study, arm after arm, resumable, one MLflow run per arm.

Every study is a file of its own, studies/<NAME>.yaml beside params.yaml (`components.config.with_study_files`):
the consistency study studies/consistency.yaml, the default (results/consistency/report.md); further studies
studies/NAME.yaml (results/NAME/report.md, e.g. the GAPO and SEED-GRPO settings, rendered by
`components.study.diversity_report`). Every arm starts from its study's `profile` with the arm's
overrides merged over it, writes its checkpoints and reports under `data/study/<arm>/`
(`data/study-NAME/<arm>/`) and copies what the study reports (metrics, statistics, per-group
tables, summary, training log, samples) to `results/NAME/arms/<arm>/` (in git; the layout of every
study's results folder: `components.study.layout`).
An arm whose `arm.json` there carries the fingerprint of its current
params is done and skipped, so an interrupted study resumes where it stopped; an interrupted
training resumes from its newest state (`train.save_every`). Arms never touch the model registry.

MLflow: a `study` run, a child run per arm, the steps' runs under each arm. The learning-curve arm
also evaluates its `train.snapshot_every` adapters. At the end (and after every arm)
`results/consistency/report.md`, `table.csv` and the learning-curve plot are rewritten from
whatever arms are done.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from components.config import Params, ParamsError, StudyConfig, load_params, with_overrides
from components.contracts.atomic import atomic_dir, atomic_write_json, atomic_write_text
from components.contracts.checkpoint import LOG_FILE, STATE_FILE, CheckpointLayout, latest_train_state, read_state
from components.contracts.summary import SUMMARY_FILE
from components.machine import machine_record
from components.study.confirmation_report import write_confirmation_report
from components.study.diversity_report import write_diversity_report
from components.study.fairness_report import write_fairness_report
from components.study.gate_noise_report import write_gate_noise_report
from components.study.layout import ARM_FILE, StudyLayout
from components.study.report import (
    CURVE_COLUMNS,
    CURVE_FILE,
    curve_rows,
    headline_metrics,
    plot_learning_curve,
    render_markdown,
    study_table,
    untrained,
)
from components.tracking import runs
from components.validation.suite import groups_sha256
from flows import steps

RESULTS = "results"
COMMAND = "groupwise study"
COPIED = ("metrics.json", "statistics.json", "per_group_consistency.csv", "per_group_diversity.csv", "summary.md",
          "metric_deltas.csv", "comparisons.csv", "fairness_effects.csv", "decisions.csv")  # fmt: skip
SAMPLES_FILE = "samples.csv"  # the evaluation's samples (reports folder)
KEPT_SAMPLES = "samples.csv.gz"  # an arm's samples, kept beside its results
HEADLINES = "metrics.json"  # the consistency study's headline per arm and scope (DVC metrics)
CURVE_PLOT = "learning_curve.png"
CONSISTENCY = "consistency"  # the `study` section's name


@dataclass(frozen=True)
class Study:
    """Where one study's arms and results live: `consistency` (the `study` section) or `studies.<name>`."""

    name: str
    config: StudyConfig
    results: Path  # <root>/results
    params_file: Path | None = None  # the params file it was loaded from (`load_study`)

    @classmethod
    def of(cls, params: Params, name: str | None = None) -> "Study":
        name = name or CONSISTENCY
        if name == CONSISTENCY:
            return cls(name, params.study, params.root / RESULTS)
        if name not in params.studies:
            known = [CONSISTENCY, *sorted(params.studies)]
            raise ParamsError(f"study: unknown study {name!r}; known studies (studies/<name>.yaml): {known}")
        return cls(name, params.studies[name], params.root / RESULTS)

    @property
    def folder(self) -> str:
        """The name of its arms' working folders under data/ (checkpoints, reports): data/<folder>/<arm>."""
        return "study" if self.name == CONSISTENCY else f"study-{self.name}"

    @property
    def layout(self) -> StudyLayout:
        """Its results folder, results/<study>/ (`components.study.layout`)."""
        return StudyLayout(self.results / self.name)

    @property
    def arms_dir(self) -> Path:
        return self.layout.arms

    def arm_dir(self, arm: str) -> Path:
        return self.arms_dir / arm


def study_params(params: Params, study: Study) -> Params:
    """The study's own params: its overrides over the study profile. Its shared steps (benchmarks,
    groups, model, validation) run with these, once for every arm."""
    return with_overrides(params, study.config.overrides) if study.config.overrides else params


def arm_params(params: Params, study: Study, name: str) -> Params:
    """The arm's params: the study's overrides, then the arm's, over the study profile; its own
    checkpoint and report folders."""
    arm = study.config.arms[name]
    folder = f"data/{study.folder}/{name}"
    params = study_params(params, study)
    overrides = arm.overrides
    if arm.start_from is not None:  # the other arm's final adapter (it runs first: StudyConfig checks the order)
        start = f"data/{study.folder}/{arm.start_from}/checkpoints/latest"
        overrides = {**overrides, "train": {**overrides.get("train", {}), "init_adapter": start}}
    return with_overrides(
        params, overrides,
        paths={"checkpoints": f"{folder}/checkpoints", "reports": f"{folder}/reports", "registry": f"{folder}/registry"},
    )  # fmt: skip


NOT_RESULTS = {
    "paths",
    "tracking",
    "registry",
    "schedule",
    "study",
    "studies",
    "gate",
    "profile",
}  # sections an arm's results do not depend on


def arm_fingerprint(params: Params, kind: str) -> str:
    """What an arm's results depend on (`Params.fingerprint`): every section but `NOT_RESULTS`, and its kind."""
    return params.fingerprint(set(Params.model_fields) - NOT_RESULTS - {"root"}, kind=kind)


def built_groups_sha256(params: Params) -> str | None:
    """`groups_sha256` of the arm's groups files, or None where none is built here (a submitter
    that leaves building to its workers judges their arms by params alone)."""
    folder = Path(params.paths.groups)
    return groups_sha256(folder) if folder.is_dir() and any(folder.glob("*.jsonl")) else None


def arm_done(study: Study, name: str, fingerprint: str, groups: str | None = None) -> bool:
    """The arm's results are for these params (`fingerprint`) and, when given, these groups files
    (`groups`, `groups_sha256` of the arm's paths.groups: a changed template or generator count
    builds other groups under the same params). A record from before groups were recorded is
    judged by its params alone."""
    path = study.arm_dir(name) / ARM_FILE
    if not path.is_file():
        return False
    record = json.loads(path.read_text())
    recorded = record.get("groups_sha256")
    return record.get("fingerprint") == fingerprint and (groups is None or recorded is None or recorded == groups)


def _trained(params: Params) -> bool:
    """The arm's final checkpoint exists and was written for these training params."""
    from components.data.selection import training_groups
    from components.grpo.trainer import run_fingerprint

    state = CheckpointLayout(params.paths.checkpoints).latest / STATE_FILE
    if not state.is_file():
        return False
    groups = training_groups(params.paths.groups, params.train)
    return json.loads(state.read_text()).get("fingerprint") == run_fingerprint(params, groups, 1)


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


def curve_pending(params: Params, study: Study, name: str) -> bool:
    """The learning-curve arm has snapshot adapters that its curve does not hold yet."""
    if name != study.config.learning_curve_arm or study.config.arms[name].kind != "train":
        return False
    path = study.arm_dir(name) / CURVE_FILE
    done = set(pd.read_csv(path)["step"]) if path.is_file() else set()
    snapshots = CheckpointLayout(params.paths.checkpoints).snapshot_dirs()
    return not path.is_file() or any(int(read_state(s)["steps"]) not in done for s in snapshots)


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
    if _trained(start_params) or not arm_done(study, start, arm_fingerprint(start_params, start_kind), built_groups_sha256(start_params)):
        return
    layout = CheckpointLayout(start_params.paths.checkpoints)
    resume = latest_train_state(layout.resume) is not None
    print(f"[{study.folder}/{name}] starts from {start}, whose adapter is not here: training {start} again (its results stand)")
    train_arm(start_params, study, start, parent, resume)


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
              "machine": machine_record(), "family": arm.family, "start_from": arm.start_from}  # fmt: skip
    try:
        if not arm_done(study, name, record["fingerprint"], record["groups_sha256"]):
            if arm.kind == "train":
                started = time.perf_counter()
                if not _trained(params):
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
            _write_results(params, record, out)
        if curve_pending(params, study, name):
            learning_curve(params, study, name, arm_run)
    except BaseException as exc:
        runs.end_parent_run(arm_run, runs.stopped_status(exc))
        raise
    runs.end_parent_run(arm_run, "FINISHED")
    return record


def _write_results(params: Params, record: dict, out: Path) -> None:
    """Copy the arm's results into `out` as a whole (`contracts.atomic.atomic_dir`)."""

    def write(tmp: Path) -> None:
        for file in COPIED:
            if (params.paths.reports / file).is_file():
                shutil.copy2(params.paths.reports / file, tmp / file)
        samples = params.paths.reports / SAMPLES_FILE
        if samples.is_file():  # kept, compressed: a metric added later can be scored from them (`run.score_samples`)
            with samples.open("rb") as src, gzip.open(tmp / KEPT_SAMPLES, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
        if record["kind"] == "train":
            shutil.copy2(CheckpointLayout(params.paths.checkpoints).latest / LOG_FILE, tmp / LOG_FILE)
        (tmp / ARM_FILE).write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")

    atomic_dir(out, write)  # an arm's folder appears whole, or not at all


def write_study_report(study: Study, notes: list[str] | None = None) -> Path:
    """The study's report from its finished arms (`study_report`), then the README's results lines,
    which are read from results/ (`components.study.headlines`), where the README carries them."""
    from components.study.headlines import readme_blocks
    from components.study.readme_blocks import markers, write_blocks

    path = study_report(study, notes)
    root = study.layout.folder.parent.parent
    readme = root / "README.md"
    if readme.is_file() and markers("results")[0] in readme.read_text():
        write_blocks(readme, readme_blocks(root))
    return path


def study_report(study: Study, notes: list[str] | None = None) -> Path:
    """The study's report from its finished arms: `write_consistency_report`, or that of its `report`
    kind (`components.study.diversity_report`, `fairness_report`, `gate_noise_report`, `confirmation_report`)."""
    if study.config.report == "fairness":
        arms = {name: arm.model_dump() for name, arm in study.config.arms.items()}
        return write_fairness_report(study.name, study.layout, arms, f"{COMMAND} --study {study.name}")
    if study.config.report == "diversity":
        arms = {name: arm.model_dump() for name, arm in study.config.arms.items()}
        return write_diversity_report(study.name, study.layout, arms, study.config.compare, f"{COMMAND} --study {study.name}")
    if study.config.report == "confirmation":
        return write_confirmation_report(study.layout, {name: arm.family or name for name, arm in study.config.arms.items()})
    if study.config.report == "gate_noise":
        return write_gate_noise_report(study.name, study.layout, list(study.config.arms), f"{COMMAND} --study {study.name}")
    return write_consistency_report(study, notes)


def write_consistency_report(study: Study, notes: list[str] | None = None) -> Path:
    """report.md, table.csv, metrics.json (the arms' headlines, DVC metrics) and the learning curve
    (learning_curve.csv / .png) of results/consistency/ from the finished arms."""
    layout = study.layout
    arms = {name: arm.model_dump() for name, arm in study.config.arms.items()}
    table = study_table(layout.arms, order=list(arms))
    curves = [pd.read_csv(p) for p in sorted(layout.arms.glob(f"*/{CURVE_FILE}"))]
    curve = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(columns=CURVE_COLUMNS)
    layout.folder.mkdir(parents=True, exist_ok=True)
    table.to_csv(layout.table, index=False)
    atomic_write_json(layout.folder / HEADLINES, headline_metrics(table))
    if not curve.empty:
        curve.to_csv(layout.folder / CURVE_FILE, index=False)
        plot_learning_curve(curve, layout.folder / CURVE_PLOT)
    command = COMMAND if study.name == CONSISTENCY else f"{COMMAND} --study {study.name}"
    page = render_markdown(table, curve, arms, command, [*(notes or []), *layout.notes()], study.name)
    return atomic_write_text(layout.report, page)


def report_files(study: Study) -> list[Path]:
    """What the study's report consists of (those written so far): the page, its table, the plot(s)."""
    layout = study.layout
    names = [layout.report, layout.table, layout.plot]
    if study.config.report == "consistency":
        names += [layout.folder / HEADLINES, layout.folder / CURVE_FILE, layout.folder / CURVE_PLOT]
    return [p for p in names if p.is_file()]


def load_study(params_path: str | Path, name: str | None = None) -> tuple[Params, Study]:
    """The study's params (its profile applied) and where its results live."""
    root_params = load_params(Path(params_path))
    profile = Study.of(root_params, name).config.profile
    params = load_params(Path(params_path), profile)
    return params, dataclasses.replace(Study.of(params, name), params_file=Path(params_path).resolve())


def pick_arms(chosen_study, arms: list[str] | None) -> list[str]:
    """`arms` (all of the study's when None); ParamsError naming any the study does not have."""
    config = chosen_study.config
    picked = arms or list(config.arms)
    unknown = [a for a in picked if a not in config.arms]
    if unknown:
        raise ParamsError(f"study: unknown arm(s) {unknown}; arms of study {chosen_study.name!r}: {sorted(config.arms)}")
    return picked


@flow(name="study", log_prints=True)
def study(params_path: str = "params.yaml", arms: list[str] | None = None, name: str | None = None) -> Path:
    """Run the study's arms (all, or `arms`) in order, skipping finished ones; write the report."""
    params, chosen_study = load_study(params_path, name)
    config = chosen_study.config
    chosen = pick_arms(chosen_study, arms)
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
            if config.arms[arm_name].kind == "train" and not _trained(arm):
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
