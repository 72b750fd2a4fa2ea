"""The whole params file as one typed model (`Params`), its sections composed."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from components.config.base import _Section
from components.config.evaluation import EvalConfig, GateConfig
from components.config.operations import PathsConfig, RegistryConfig, ScheduleConfig, StudyConfig, TrackingConfig
from components.config.training import DataConfig, LoraConfig, ModelConfig, RewardConfig, TrainConfig


class Params(_Section):
    """The whole `params.yaml` after the profile is applied (paths made absolute)."""

    profile: str = "default"
    seed: int = Field(1234, description="the one seed of data splits, sampling and training")
    paths: PathsConfig = PathsConfig()
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    lora: LoraConfig = LoraConfig()
    train: TrainConfig = TrainConfig()
    reward: RewardConfig = RewardConfig()
    eval: EvalConfig = EvalConfig()
    gate: GateConfig = GateConfig()
    tracking: TrackingConfig = TrackingConfig()
    registry: RegistryConfig = RegistryConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    study: StudyConfig = StudyConfig()
    studies: dict[str, StudyConfig] = Field(
        default_factory=dict, description="further studies by name (`groupwise study --study NAME`, results/NAME.md)"
    )
    root: Path = Field(Path("."), exclude=True, description="folder of the params file")

    @property
    def eval_seed(self) -> int:
        """The evaluation's seed: `eval.seed`, else the run's `seed`."""
        return self.seed if self.eval.seed is None else self.eval.seed

    @model_validator(mode="after")
    def _study_names(self) -> "Params":
        for name in self.studies:
            if name == "consistency" or not name or not all(c.isalnum() or c in "-_" for c in name):
                raise ValueError(f"studies: {name!r} is not a study name (letters, digits, '-', '_'; "
                                 "'consistency' is the `study` section)")  # fmt: skip
        for name, study in self.studies.items():
            unknown = [other for other in study.pooled_with if other not in self.studies or other == name]
            if unknown:
                raise ValueError(
                    f"studies.{name}.pooled_with: {unknown} are not other studies (studies/<name>.yaml): {sorted(self.studies)}"
                )
        return self

    @model_validator(mode="after")
    def _generation_fits_engines(self) -> "Params":
        """A prompt (at most data.max_prompt_tokens) plus max_new_tokens must fit the max_model_len of
        every vLLM engine in use; the model's own context is checked where it is loaded."""
        prompt = self.data.max_prompt_tokens
        engines = (
            ("train", self.train.max_new_tokens, self.train.rollout.engine, "train.rollout.vllm", self.train.rollout.vllm),
            ("eval", self.eval.max_new_tokens, self.eval.engine, "eval.vllm", self.eval.vllm),
        )
        for key, new_tokens, engine, name, vllm in engines:
            if engine == "vllm" and prompt + new_tokens > vllm.max_model_len:
                raise ValueError(
                    f"{key}.max_new_tokens ({new_tokens}) + data.max_prompt_tokens ({prompt}) exceed "
                    f"{name}.max_model_len ({vllm.max_model_len}): lower {key}.max_new_tokens or raise {name}.max_model_len"
                )
        return self

    def section_dict(self, *names: str) -> dict[str, Any]:
        """Plain dict of some sections (for logging as run params)."""
        return self.model_dump(mode="json", include=set(names))

    def fingerprint(self, sections: Iterable[str], **depends_on: Any) -> str:
        """The one fingerprint of saved work (a training state a run resumes, a finished study arm):
        the first 16 hex digits of the SHA-256 of `sections` of these params and what else the work
        depends on (`depends_on`: the groups, the world size, the arm's kind). Two rules: a field at
        its default is left out (a field added later, whose default keeps the old behaviour, does
        not invalidate earlier work; changing a default is a decision the defaults' drift test makes
        visible), and so are the `OPERATIONAL` knobs (how often a run saves or logs, where it runs:
        they do not change what it computes) and the knobs of an engine not in use (`ENGINE_KNOBS`)."""
        from components.config.fingerprint import fingerprint

        return fingerprint(self, sections, **depends_on)
