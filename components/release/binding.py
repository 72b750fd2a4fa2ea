"""What an evaluation judged, bound to the files registration would publish.

`evaluate` records an `EvaluationBinding` in metrics.json: the SHA-256 of the adapter files it
evaluated, of the base weights it loaded, and of the params that decide the evaluation. `register`
recomputes it from the files on disk and refuses on any difference, so a version registered as
`@challenger` is the adapter whose metrics passed the gates: a stale metrics.json, an adapter
retrained (or truncated) since, another base model or other evaluation params are all refused,
with the differing field named.

What a registered version was built from is recorded with it too: `version_provenance` (group
files and the training data's size, params hash, code), `version_params` (the training-relevant
params, `RECORDED_PARAMS`) and `registration_fingerprint` (adapter and metrics.json, the key that
makes registration idempotent), all as version tags (`components.contracts.version_tags`), so a
version's model card needs no run of the tracking server.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from components.code_version import DIRTY_TAG, CodeVersion, code_version
from components.config import Params
from components.contracts.checkpoint import adapter_files
from components.contracts.errors import UserError
from components.contracts.summary import EvaluatedFiles, EvaluationSummary
from components.contracts.version_tags import Provenance
from components.hashing import files_sha256, folder_files_sha256
from components.models.provision import weights_sha256

# the params an evaluation's numbers depend on (not gates, registry, tracking, paths, schedule)
EVALUATION_SECTIONS = {"seed", "model", "data", "eval", "reward"}
# the params recorded with a registered version (`version_params`), from the register step's params:
# the evaluation's sections are those metrics.json was judged with (`check_evaluated`), train and lora
# those of params.yaml at registration, like `params.hash`; a mapping (reward.weights) key by key
RECORDED_PARAMS = (
    "seed",
    "model.source", "model.id", "model.path", "model.gguf_file", "model.dtype",
    "lora.r", "lora.lora_alpha", "lora.dropout", "lora.target_modules",
    "train.tasks", "train.domains", "train.steps", "train.groups_per_step", "train.samples_per_prompt",
    "train.max_new_tokens", "train.temperature", "train.lr", "train.lr_scheduler", "train.loss_type",
    "train.policy_loss", "train.beta", "train.epsilon_low", "train.epsilon_high", "train.num_iterations",
    "train.advantage.estimator", "train.advantage.scale", "train.rollout.engine",
    "reward.weights", "reward.entropy_scope", "reward.entropy_max_words",
    "eval.samples_per_prompt", "eval.temperature", "eval.max_new_tokens", "eval.significance_level",
)  # fmt: skip
METRICS_KEY = "evaluated"  # the summary's field (`EvaluationSummary.evaluated`)


class BindingError(UserError, ValueError):
    """Registration refused: the files differ from what was evaluated, or the adapter does not load."""


def evaluation_params_sha256(params: Params) -> str:
    payload = params.model_dump(mode="json", include=EVALUATION_SECTIONS)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def check_adapter_loads(adapter: Path) -> None:
    """The adapter folder holds a readable PEFT adapter: config JSON and every tensor of its safetensors.

    Raises BindingError naming the file and what is wrong (missing, not JSON, truncated tensors).
    """
    from safetensors import SafetensorError, safe_open

    config, weights = adapter_files(adapter)
    for path in (config, weights):
        if not path.is_file():
            raise BindingError(f"{path}: missing checkpoint (no trained adapter here; run `groupwise train`)")
    try:
        json.loads(config.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BindingError(f"{config}: not a valid adapter config ({exc})") from None
    try:
        with safe_open(str(weights), framework="pt") as fh:
            for name in fh.keys():
                fh.get_tensor(name)
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        raise BindingError(f"{weights}: the adapter does not load ({str(exc).splitlines()[0]})") from None


@dataclass(frozen=True)
class EvaluationBinding:
    adapter_sha256: str | None  # None: the candidate was the base model itself (a decoding arm)
    base_weights_sha256: str
    params_sha256: str

    @classmethod
    def of(cls, params: Params, adapter: Path | None) -> "EvaluationBinding":
        return cls(
            adapter_sha256=None if adapter is None else folder_files_sha256(adapter),
            base_weights_sha256=weights_sha256(params.paths.base_model),  # hashed once per process
            params_sha256=evaluation_params_sha256(params),
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def record(self) -> EvaluatedFiles:
        """As the summary records it (`EvaluationSummary.evaluated`)."""
        return EvaluatedFiles(**asdict(self))

    def differences(self, recorded: EvaluatedFiles | None) -> list[str]:
        """What differs between these files and what metrics.json says was evaluated (empty: same)."""
        if recorded is None:
            return ["metrics.json records no evaluated files (written before bindings, or not by `groupwise evaluate`)"]
        what = {
            "adapter_sha256": "the adapter (retrained or changed since it was evaluated)",
            "base_weights_sha256": "the base model weights",
            "params_sha256": f"the evaluation params ({', '.join(sorted(EVALUATION_SECTIONS))} of params.yaml)",
        }
        return [
            f"{text}: evaluated {str(getattr(recorded, key))[:12]}, now {str(getattr(self, key))[:12]}"
            for key, text in what.items()
            if getattr(recorded, key) != getattr(self, key)
        ]


def check_evaluated(params: Params, summary: EvaluationSummary, metrics_path: Path, adapter: Path) -> None:
    """Refuse (BindingError) unless `summary` is the evaluation of this loadable adapter, these base
    weights and these evaluation params."""
    if summary.candidate is not None and summary.candidate.source != "adapter":
        raise BindingError(
            f"{metrics_path}: the evaluated candidate was the base model (eval.candidate.source), not an adapter; nothing to register"
        )
    check_adapter_loads(adapter)
    differences = EvaluationBinding.of(params, adapter).differences(summary.evaluated)
    if differences:
        raise BindingError(
            f"register refused, nothing registered: {metrics_path} is not the evaluation of these files ("
            + "; ".join(differences)
            + "); run `groupwise evaluate` again"
        )


def params_hash(params: Params) -> str:
    """SHA-256 (16 hex) of every params section but paths and tracking."""
    payload = json.dumps(params.model_dump(mode="json", exclude={"paths", "tracking"}), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def dvc_md5(folder: Path) -> str:
    """DVC's own hash of a folder (`<md5>.dir`, as in dvc.lock), or 'unknown' when it is missing."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs import LocalFileSystem

    if not Path(folder).is_dir():
        return "unknown"
    fs = LocalFileSystem()
    with tempfile.TemporaryDirectory() as tmp:
        _, _, obj = build(HashFileDB(fs, tmp), str(folder), fs, "md5")
    return obj.hash_info.value


def version_provenance(params: Params, evaluated_code: CodeVersion | None = None) -> Provenance:
    """What a registered version is built from: the group files (this hasher's digest and DVC's
    md5), how many groups and prompts of them `train` selects (not recorded without group files),
    the params, the checkpoint's DVC md5, the code that registers it (`code_version`) and the code
    that evaluated it (`evaluated_code`, metrics.json's `code`)."""
    from components.contracts.checkpoint import CheckpointLayout
    from components.data.selection import training_groups

    try:
        groups = training_groups(params.paths.groups, params.train)
    except FileNotFoundError:
        groups = None
    code = code_version()
    return Provenance(
        data_sha256=files_sha256(sorted(params.paths.groups.glob("*.jsonl"))),
        data_dvc_md5=dvc_md5(params.paths.groups),
        params_hash=params_hash(params),
        git_commit=code.commit,
        git_dirty=code.to_tags()[DIRTY_TAG],
        git_diff_sha256=code.diff_sha256,
        evaluated_commit=None if evaluated_code is None else evaluated_code.short,
        checkpoint_dvc_md5=dvc_md5(CheckpointLayout(params.paths.checkpoints).latest),
        train_groups=None if groups is None else len(groups),
        train_prompts=None if groups is None else sum(len(g.members) for g in groups),
    )


def version_params(params: Params) -> dict[str, str]:
    """`RECORDED_PARAMS` as version tags record them: dotted path -> the value, a string as is and
    anything else as JSON ('0.0002', '["q_proj", "v_proj"]', 'null'); a mapping key by key
    ('reward.weights.stability'). KeyError names a recorded path the params do not have."""
    from components.tracking.runs import flatten

    dump, out = params.model_dump(mode="json"), {}
    for path in RECORDED_PARAMS:
        value = dump
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise KeyError(f"RECORDED_PARAMS: params have no field {path!r}")
            value = value[part]
        for key, leaf in flatten({path: value}).items():
            out[key] = leaf if isinstance(leaf, str) else json.dumps(leaf)
    return out


def registration_fingerprint(adapter: Path, metrics_path: Path) -> str:
    """SHA-256 (32 hex) of the adapter files and metrics.json: the same registration, the same key."""
    adapter_files = folder_files_sha256(adapter)
    return hashlib.sha256((adapter_files + Path(metrics_path).read_text()).encode()).hexdigest()[:32]
