"""Typed view of `params.yaml`: every knob of the pipeline, validated at the edge.

`params.yaml` holds the configuration that runs plus named `profiles` (e.g. `smoke`), each a set of
overrides. The layers, each deep-merged over the one before: the typed defaults, the profile the file's
own `profile` key names, the file's top level (so what the file lists, and `dvc exp show` with it, is
what runs). A profile asked for by the `profile` argument or `GROUPWISE_PROFILE` takes the place of the
file's own and wins over the file's values (refused inside a DVC stage, whose record lists the file).
`groupwise use-profile NAME` writes a profile into the file.

Values are coerced by pydantic, so `dvc exp run -S train.lr=2e-5` (which DVC writes as the string
'2e-05') still reads as a float. Relative paths resolve against the folder of the params file.

The package's rooms: `base` (the section base class, `ParamsError`), the sections by concern
(`training`, `evaluation`, `operations`), `params` (`Params`, the whole file), `loading`
(`load_params`, overrides), `migrations` (old keys and former defaults), `fingerprint` (of saved
work) and `tree` (walking nested params). Everything a caller needs is importable from here.
"""

from components.config.base import ParamsError
from components.config.evaluation import CandidateConfig, EvalConfig, FairnessConfig, GateConfig
from components.config.fingerprint import ENGINE_KNOBS, OPERATIONAL
from components.config.loading import (
    CONSISTENCY_STUDY,
    DATA_DIR,
    STUDIES_DIR,
    assignments_to_overrides,
    file_profile,
    load_params,
    profile_overrides,
    with_overrides,
    with_sections,
    with_study_files,
)
from components.config.migrations import (
    ADDED_DEFAULT_REWARDS,
    FORMER_DEFAULTS,
    RENAMED_KEYS,
    TRL_PARAM_ALIASES,
    ParamsDeprecationWarning,
    migrate_keys,
)
from components.config.operations import (
    PREREGISTERED_REPORTS,
    PathsConfig,
    RegistryConfig,
    ScheduleConfig,
    StudyArm,
    StudyConfig,
    TrackingConfig,
    expand_seeds,
)
from components.config.params import Params
from components.config.training import (
    AdvantageConfig,
    DataConfig,
    DecisionGroupsConfig,
    DecisionPairingConfig,
    ImportanceSamplingConfig,
    LoraConfig,
    ModelConfig,
    PlantedBiasConfig,
    RewardConfig,
    RolloutConfig,
    RolloutVllmConfig,
    TinyModelConfig,
    TrainConfig,
    VllmConfig,
)

__all__ = [
    "ADDED_DEFAULT_REWARDS", "CONSISTENCY_STUDY", "DATA_DIR", "ENGINE_KNOBS", "FORMER_DEFAULTS", "OPERATIONAL",
    "PREREGISTERED_REPORTS", "RENAMED_KEYS", "STUDIES_DIR", "TRL_PARAM_ALIASES", "AdvantageConfig", "CandidateConfig", "DataConfig",
    "DecisionGroupsConfig", "DecisionPairingConfig", "EvalConfig", "FairnessConfig", "GateConfig",
    "ImportanceSamplingConfig", "LoraConfig", "ModelConfig", "Params", "ParamsDeprecationWarning", "ParamsError",
    "PathsConfig", "PlantedBiasConfig", "RegistryConfig", "RewardConfig", "RolloutConfig", "RolloutVllmConfig",
    "ScheduleConfig", "StudyArm", "StudyConfig", "TinyModelConfig", "TrackingConfig", "TrainConfig", "VllmConfig",
    "assignments_to_overrides", "expand_seeds", "file_profile", "load_params", "migrate_keys", "profile_overrides", "with_overrides",
    "with_sections", "with_study_files",
]  # fmt: skip
