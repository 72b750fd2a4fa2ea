"""The sections that say where and when work runs: paths, tracking, registry, studies, schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from components.config.base import _Section


class PathsConfig(_Section):
    """Where each step reads and writes, relative to the params file."""

    templates: Path = Field(Path("data/templates"), description="the templates `build` renders into consistency groups")
    heldout_templates: Path | None = Field(
        None, description="templates whose groups are all held out: domains only ever evaluated (null: none)"
    )
    instruction_families: Path = Field(
        Path("data/instructions/families.yaml"),
        description="IFEval's instruction families and their split, train | heldout (data.instructions: families)",
    )
    groups: Path = Field(Path("data/groups"), description="the built prompt groups (PromptGroup JSONL) the GX suite validates")
    validation: Path = Field(Path("data/validation"), description="the validation report and its Data Docs")
    base_model: Path = Field(Path("data/models/base"), description="the base model in safetensors (`groupwise prepare-model`)")
    checkpoints: Path = Field(Path("data/checkpoints"), description="training checkpoints; `latest` is the one evaluate and register take")
    reports: Path = Field(Path("data/reports"), description="the evaluation: metrics.json, summary.md, report.html, plots")
    registry: Path = Field(Path("data/registry"), description="the registration's decision and gate table")
    exports: Path = Field(Path("data/exports"), description="merged exports `groupwise serve` and `groupwise export` write")
    benchmarks: Path = Field(Path("data/benchmarks"), description="decision benchmarks' data (`groupwise prepare-benchmarks`, not in git)")
    logs: Path = Field(Path("data/logs"), description="the generation engines' own logs (engines.log), kept off the console")
    base_outputs: Path | None = Field(
        Path("data/base-outputs"),
        description="the base model's evaluation outputs kept between evaluations with the same base, prompts, sampling, "
        "engine and machine (components.evaluation.base_outputs); null: keep none",
    )


STEP_TIMEOUTS = {"default": 3600.0, "train": 86400.0, "evaluate": 86400.0}  # seconds: training and evaluation at a study's size take hours


class TrackingConfig(_Section):
    """MLflow tracking."""

    uri: str = Field(
        "sqlite:///mlruns/mlflow.db",
        description="the MLflow tracking URI (or env GROUPWISE_TRACKING_URI); a sqlite path is relative to the params file",
    )
    artifact_location: Path = Field(Path("mlruns/artifacts"), description="where a new experiment keeps its artifacts")
    experiment: str = Field("groupwise", description="the MLflow experiment of every run")
    retries: int = Field(3, ge=0, description="flow task retries on a transient tracking fault")
    retry_delay_seconds: float = Field(10.0, ge=0, description="wait between those retries")
    connect_timeout_seconds: float = Field(
        30.0, gt=0,
        description="how long a step waits, in all, for a tracking server to accept connections before it stops in one "
        "line naming the URI (checked once, before any work; MLflow's own retry schedule would wait minutes)",
    )  # fmt: skip
    outage_seconds: float = Field(
        600.0, ge=0,
        description="a tracking server that goes away during training: how long the finished step waits for it to "
        "come back and take the records kept meanwhile, before it stops in one line",
    )  # fmt: skip
    step_timeout_seconds: dict[str, float] = Field(
        default_factory=lambda: dict(STEP_TIMEOUTS),
        description="the retrain flow's time limit per step (Prefect's task timeout; a step past it fails the flow and "
        "closes its MLflow runs as FAILED); a step left out has the `default` entry's limit",
    )  # fmt: skip

    def step_timeout(self, step: str) -> float:
        """The time limit of `step` in seconds (its entry, else `default`)."""
        return self.step_timeout_seconds.get(step, self.step_timeout_seconds.get("default", STEP_TIMEOUTS["default"]))


_ALIAS = r"^[A-Za-z][A-Za-z0-9_-]{0,254}$"  # MLflow aliases: no `v<digits>`, no `latest`


class RegistryConfig(_Section):
    """The MLflow Model Registry and its aliases."""

    model_name: str = Field(
        "groupwise-smollm2-lora",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$",
        description="letters, digits, '_', '.', '-' (quotes would break MLflow's search filters)",
    )
    alias: str = Field("challenger", pattern=_ALIAS, description="set on every registration that passes the gates")
    champion_alias: str = Field("champion", pattern=_ALIAS, description="moved only by `groupwise promote` / `groupwise rollback`")
    previous_champion_alias: str = Field(
        "previous-champion", pattern=_ALIAS, description="the champion before the last promotion (what rollback returns to)"
    )
    package_base_model: bool = Field(False, description="copy the base weights into the model version (portable, larger)")
    lock_timeout_seconds: float = Field(120.0, gt=0, description="wait for another process's registry update before failing")
    register_experiments: bool = Field(
        False, description="register from inside `dvc exp run` too (default: an experiment judges the gates, registers nothing)"
    )

    @model_validator(mode="after")
    def _distinct_aliases(self) -> "RegistryConfig":
        aliases = [self.alias, self.champion_alias, self.previous_champion_alias]
        if len(set(aliases)) != 3:
            raise ValueError(f"alias, champion_alias, previous_champion_alias must differ: {aliases}")
        if any(a == "latest" or (a[:1] == "v" and a[1:].isdigit()) for a in aliases):
            raise ValueError(f"MLflow reserves `latest` and `v<number>` as aliases: {aliases}")
        return self


class StudyArm(_Section):
    """One arm of `groupwise study`: overrides of the study profile, and whether it trains."""

    kind: Literal["train", "decoding"] = Field(
        "train", description="train: GRPO then evaluate the adapter | decoding: evaluate eval.candidate, no training"
    )
    description: str = ""
    overrides: dict[str, Any] = Field(default_factory=dict, description="params sections merged over the profile")
    seeds: list[int] = Field(
        default_factory=list,
        description="train arms: one arm per training seed, named <arm>-s1, <arm>-s2, ... (the top-level seed of each)",
    )
    start_from: str | None = Field(
        None, description="train arms: start from this arm's final adapter (train.init_adapter; with seeds, the same seed's)"
    )
    family: str | None = Field(None, description="the arm it was expanded from (set by `seeds`, not by hand)")
    judged_as: str | None = Field(
        None, description="report: judge this arm by that arm's targets too (a variant of a recipe, e.g. a larger budget)"
    )


def expand_seeds(arms: dict[str, StudyArm]) -> dict[str, StudyArm]:
    """Each arm with `seeds` as one arm per seed (`<arm>-s<i>`, its `seed` overridden, `family` the
    arm's name; `start_from` pointing to the same seed's arm of that family)."""
    out: dict[str, StudyArm] = {}
    for name, arm in arms.items():
        if not arm.seeds:
            out[name] = arm
            continue
        for i, seed in enumerate(arm.seeds, start=1):
            start = f"{arm.start_from}-s{i}" if arm.start_from and arms.get(arm.start_from, arm).seeds else arm.start_from
            out[f"{name}-s{i}"] = arm.model_copy(
                update={
                    "seeds": [],
                    "family": name,
                    "start_from": start,
                    "overrides": {**arm.overrides, "seed": seed},
                    "description": f"{arm.description} (seed {seed})",
                }  # fmt: skip
            )
    return out


PREREGISTERED_REPORTS = ("confirmation", "instruction_confirmation")  # run on committed code, all arms on one commit


class StudyConfig(_Section):
    """`groupwise study [--study NAME]`: arms run one after another from one profile; results/<NAME>.md."""

    profile: str = Field("paper", description="profile every arm starts from")
    report: Literal[
        "consistency", "instruction_calibration", "diversity", "fairness", "gate_noise", "confirmation", "instruction_confirmation"
    ] = Field(
        "consistency",
        description="consistency: the paper's gap per arm (results/consistency/report.md) | instruction_calibration: the "
        "consistency report with the instruction calibration's rule judged per arm (results/instruction-calibration/plan.md) | diversity: validity, coverage, "
        "all-valid and accuracy per task family, paired against the base and between arms | fairness: the decision "
        "benchmarks' held-out discrimination scores per arm and seed | gate_noise: the default gates judged on A/A "
        "evaluations (the base model against itself), their noise level per gate | confirmation: a pre-registered "
        "confirmation's primary endpoint, targets and verdict by its plan (results/NAME/plan.md) (results/NAME/report.md) | "
        "instruction_confirmation: the instruction confirmation's endpoints and verdict by its plan, over this study's arms and "
        "those of `pooled_with` (written beside the one preregistration.json)",
    )
    compare: list[tuple[str, str]] = Field(
        default_factory=list,
        description="diversity report: [arm A, arm B] pairs compared head to head (tuned vs tuned; an arm with seeds as the mean of its seeds)",
    )
    learning_curve_arm: str | None = Field(None, description="arm whose train.snapshot_every adapters are evaluated for the learning curve")
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="params sections merged over the profile for every arm, under each arm's own overrides (what the "
        "study fixes for all its arms and the profile's users need not share, e.g. a smaller capability check)",
    )
    arms: dict[str, StudyArm] = Field(default_factory=dict)
    code_differences: list[str] = Field(
        default_factory=list,
        description="paths (folders or files of the repository) in which the code of arms pooled by the report may "
        "differ, e.g. [docs, components/reporting]; every other change between the commits its arms ran is refused "
        "(a confirmation allows none)",
    )

    pooled_with: list[str] = Field(
        default_factory=list,
        description="other studies whose arms this study's report pools, e.g. a confirmation's comparison arms that need "
        "other data settings and so a study of their own; every pooled arm's code is checked with this study's",
    )

    @model_validator(mode="after")
    def _known_curve_arm(self) -> "StudyConfig":
        if self.report in PREREGISTERED_REPORTS and self.code_differences:
            raise ValueError(f"code_differences: a confirmation runs every arm on one code and allows none, got {self.code_differences}")
        if any(arm.seeds for arm in self.arms.values()):
            self.arms = expand_seeds(self.arms)
        for name, arm in self.arms.items():
            shared = [key for key in ("data", "paths") if key in arm.overrides]
            if shared:
                raise ValueError(
                    f"arms.{name}.overrides: {shared} are built once for every arm of a study (its groups); "
                    "set them in the study's overrides, or give the arm a study of its own"
                )
            if arm.start_from is not None and (arm.start_from not in self.arms or self.arms[arm.start_from].kind != "train"):
                raise ValueError(f"arms.{name}.start_from: {arm.start_from!r} is not a train arm of this study")
            if arm.start_from is not None and list(self.arms).index(arm.start_from) > list(self.arms).index(name):
                raise ValueError(f"arms.{name}.start_from: {arm.start_from!r} must come before {name!r} (arms run in order)")
        named = set(self.arms) | {arm.family for arm in self.arms.values() if arm.family}
        for name, arm in self.arms.items():
            if arm.judged_as is not None and (arm.judged_as not in named or arm.judged_as == (arm.family or name)):
                raise ValueError(f"arms.{name}.judged_as: {arm.judged_as!r} is not another arm of this study")
        if self.learning_curve_arm is not None and self.learning_curve_arm not in self.arms:
            raise ValueError(f"learning_curve_arm {self.learning_curve_arm!r} is not an arm; arms: {sorted(self.arms)}")
        for name in self.arms:
            if not name or not all(c.isalnum() or c in "-_." for c in name):
                raise ValueError(f"arms: {name!r} is not a valid arm name (letters, digits, '-', '_', '.')")
        families = {arm.family for arm in self.arms.values() if arm.family}  # an arm with seeds is compared as one
        for pair in self.compare:
            unknown = [a for a in pair if a not in self.arms and a not in families]
            if unknown:
                raise ValueError(f"compare: {unknown} not arms of this study; arms: {sorted({*self.arms, *families})}")
        return self


class ScheduleConfig(_Section):
    """Scheduled retraining (`groupwise schedule`): a Prefect deployment on a cron."""

    cron: str = Field("0 3 * * 1", description="five cron fields, e.g. Mondays 03:00")
    timezone: str = Field("UTC", description="IANA time zone of the cron")
    deployment: str = Field("groupwise-retrain", min_length=1, description="the Prefect deployment's name")
    profile: str | None = Field(None, description="profile the scheduled runs use (default: params)")

    @model_validator(mode="after")
    def _valid_cron_and_zone(self) -> "ScheduleConfig":
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        if len(self.cron.split()) != 5:
            raise ValueError(f"cron: {self.cron!r} must have 5 fields (minute hour day month weekday)")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"timezone: unknown IANA time zone {self.timezone!r}") from exc
        return self
