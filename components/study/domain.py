"""The study domain: what a study and its arms are, their params, and when an arm is done.

A study is a file of its own, studies/<NAME>.yaml beside params.yaml (`components.config.with_study_files`),
or the `study` section (the consistency study). Every arm starts from its study's `profile` with the
study's and then the arm's overrides merged over it, writes its checkpoints and reports under
`data/study/<arm>/` (`data/study-NAME/<arm>/`) and copies what the study reports to
`results/NAME/arms/<arm>/` (`write_results`; the layout: `components.study.layout`). An arm whose
`arm.json` there carries the fingerprint of its current params (and groups) is done. A pre-registered
study freezes its params (`freeze_params`, results/NAME/frozen_params.json): its arms then start from
those, whatever the product's defaults become. `flows.study`
runs arms; `components.study.reports` writes a study's report.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd

from components.config import Params, ParamsError, StudyConfig, load_params, with_overrides, with_sections
from components.config.migrations import with_former_defaults
from components.contracts.atomic import atomic_dir
from components.contracts.checkpoint import LOG_FILE, STATE_FILE, CheckpointLayout, read_state
from components.study.layout import ARM_FILE, StudyLayout
from components.study.report import CURVE_FILE
from components.validation.suite import groups_sha256

RESULTS = "results"
COMMAND = "groupwise study"
COPIED = ("metrics.json", "statistics.json", "per_group_consistency.csv", "per_group_diversity.csv", "per_group_instructions.csv",
          "summary.md", "metric_deltas.csv", "comparisons.csv", "fairness_effects.csv", "decisions.csv")  # fmt: skip
SAMPLES_FILE = "samples.csv"  # the evaluation's samples (reports folder)
ARM_SAMPLES_FILE = "samples.csv.gz"  # an arm's samples, kept beside its results
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

    @property
    def pooled_layouts(self) -> list[StudyLayout]:
        """Its results folder, then those of the studies its report pools (`pooled_with`)."""
        return [self.layout, *(StudyLayout(self.results / other) for other in self.config.pooled_with)]


def study_params(params: Params, study: Study) -> Params:
    """The study's own params: its overrides over the study profile, then, where the study froze them
    (`frozen_params.json`, `freeze_params`), its frozen sections in place of what the profile and
    today's defaults give (a field added since takes its former default, `with_former_defaults`).
    Its shared steps (benchmarks, groups, model, validation) run with these, once for every arm."""
    params = with_overrides(params, study.config.overrides) if study.config.overrides else params
    frozen = study.layout.frozen_params
    if frozen.is_file():
        params = with_sections(params, with_former_defaults(json.loads(frozen.read_text())["params"]), str(frozen))
    return params


def freeze_params(params: Params, study: Study) -> Path:
    """Write `frozen_params.json`: the study's params of every section its arms' results depend on,
    as today's defaults, profile and study file give them. From then on its arms start from these
    (`study_params`), so a default the product changes later does not change a pre-registered study
    half way through. Refused (ParamsError) where the file exists or where a finished arm's record
    is not for these params: a freeze keeps what ran, it never changes it."""
    frozen = study.layout.frozen_params
    if frozen.is_file():
        raise ParamsError(f"{frozen}: exists; a study's frozen params never change")
    current = study_params(params, study)
    stale = [name for name, arm in study.config.arms.items() if (study.arm_dir(name) / ARM_FILE).is_file()
             and not arm_done(study, name, arm_fingerprint(arm_params(params, study, name), arm.kind))]  # fmt: skip
    if stale:
        raise ParamsError(f"study {study.name}: finished arms {stale} ran under other params; a freeze would not keep them")
    record = {
        "study": study.name,
        "written": date.today().isoformat(),
        "what": "the params every arm of this study starts from (its arms' overrides go over them); "
        "read by `groupwise study` in place of the profile's and today's defaults",
        "params": current.model_dump(mode="json", include=result_sections()),
    }
    frozen.parent.mkdir(parents=True, exist_ok=True)
    frozen.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return frozen


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


RESULT_INDEPENDENT_SECTIONS = {
    "paths",
    "tracking",
    "registry",
    "schedule",
    "study",
    "studies",
    "gate",
    "profile",
}  # sections an arm's results do not depend on


def result_sections() -> set[str]:
    """The sections of params an arm's results depend on: all but `RESULT_INDEPENDENT_SECTIONS`."""
    return set(Params.model_fields) - RESULT_INDEPENDENT_SECTIONS - {"root"}


def arm_fingerprint(params: Params, kind: str) -> str:
    """What an arm's results depend on (`Params.fingerprint`): its `result_sections`, and its kind."""
    return params.fingerprint(result_sections(), kind=kind)


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


def trained(params: Params) -> bool:
    """The arm's final checkpoint exists and was written for these training params."""
    from components.data.selection import training_groups
    from components.grpo.trainer import run_fingerprint

    state = CheckpointLayout(params.paths.checkpoints).latest / STATE_FILE
    if not state.is_file():
        return False
    groups = training_groups(params.paths.groups, params.train)
    return json.loads(state.read_text()).get("fingerprint") == run_fingerprint(params, groups, 1)


def curve_pending(params: Params, study: Study, name: str) -> bool:
    """The learning-curve arm has snapshot adapters that its curve does not hold yet."""
    if name != study.config.learning_curve_arm or study.config.arms[name].kind != "train":
        return False
    path = study.arm_dir(name) / CURVE_FILE
    done = set(pd.read_csv(path)["step"]) if path.is_file() else set()
    snapshots = CheckpointLayout(params.paths.checkpoints).snapshot_dirs()
    return not path.is_file() or any(int(read_state(s)["steps"]) not in done for s in snapshots)


def write_results(params: Params, record: dict, out: Path) -> None:
    """Copy the arm's results into `out` as a whole (`contracts.atomic.atomic_dir`)."""

    def write(tmp: Path) -> None:
        for file in COPIED:
            if (params.paths.reports / file).is_file():
                shutil.copy2(params.paths.reports / file, tmp / file)
        samples = params.paths.reports / SAMPLES_FILE
        if samples.is_file():  # kept, compressed: a metric added later can be scored from them (`run.score_samples`)
            with samples.open("rb") as src, gzip.open(tmp / ARM_SAMPLES_FILE, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
        if record["kind"] == "train":
            shutil.copy2(CheckpointLayout(params.paths.checkpoints).latest / LOG_FILE, tmp / LOG_FILE)
        (tmp / ARM_FILE).write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")

    atomic_dir(out, write)  # an arm's folder appears whole, or not at all


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
