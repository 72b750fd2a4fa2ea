"""The sections that decide how a model is judged: the candidate, decision benchmarks (fairness), eval, gate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from components.config.base import _ENGINE_DTYPE, _Section
from components.config.training import VllmConfig


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
    """Decision benchmarks scored in every evaluation (`components.fairness_benchmarks`)."""

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
    races: list[str] | None = Field(
        ["white"],
        description="races to fill in (null: all five); must include the baseline white (the default, one race: 60 prompts a "
        "model, the quick start's size; the studies' profiles fill in all five)",
    )
    bbq_items: int | None = Field(
        100,
        ge=1,
        description="BBQ items a model answers: whole sets of four (ambiguous and disambiguated context x negative and "
        "non-negative question), the first of a fixed seeded order that takes BBQ's 50 templates in turn "
        "(components.fairness_benchmarks.bbq; 100: 25 templates, the quick start's size; 400: two sets of each template; "
        "null: all 5,656)",
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
    """Evaluation: base against the candidate on the held-out groups, tasks and decision benchmarks."""

    engine: str = Field("vllm", description="a registered generation engine (components.generation.engines): vllm | transformers")
    allow_fallback: bool = Field(False, description="if the requested engine cannot start, use transformers instead (logged, recorded)")
    vllm: VllmConfig = VllmConfig()
    dtype: Annotated[Literal["auto", "float32", "bfloat16"], _ENGINE_DTYPE] = Field(
        "auto",
        validate_default=True,
        description="weights and activations of the evaluated models (both engines); auto: bfloat16 where the machine "
        "computes it natively, else float32 (resolved when the params are read)",
    )
    embedding_dtype: Annotated[Literal["auto", "float32", "bfloat16"], _ENGINE_DTYPE] = Field(
        "auto",
        validate_default=True,
        description="autocast of the sentence-embedding model (cosine to fp32 >= 0.9999); auto: bfloat16 where the "
        "machine computes it natively, else float32 (emulated bf16 is several times slower)",
    )
    embedding_batch_size: int = Field(
        32, ge=1, description="texts per embedding forward pass (32: ~18 % more texts/s than 128 on a 2-core CPU in bf16)"
    )
    samples_per_prompt: int = Field(6, ge=2, description="n per prompt, the paper's K (diversity metrics need >= 2)")
    max_new_tokens: int = Field(512, ge=1, description=">= 95 % of base samples end with EOS within it (see data.answer_instruction)")
    temperature: float = Field(
        0.7, ge=0, description="documented evaluation temperature (the paper gives none); 0: greedy (one sample, repeated n times)"
    )
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling of the evaluation (1.0: off)")
    seed: int | None = Field(
        None,
        description="seed of the evaluation's sampling and bootstrap (null: the run's seed); a study that gives every arm "
        "the same one samples the base model once for all of them (paths.base_outputs)",
    )
    batch_size: int = Field(48, ge=1, description="sequences per generate call of the transformers engine")
    max_consistency_groups: int = Field(
        12,
        ge=1,
        description="held-out consistency groups evaluated, the first N (12: the quick start's size, which detects only a large "
        "change of the gap; the studies' profiles evaluate all 104)",
    )
    max_diversity_tasks: int = Field(4, ge=0, description="held-out diversity tasks evaluated, the first N")
    split: Literal["heldout", "train"] = Field(
        "heldout",
        description="the consistency groups and diversity tasks that judge a model: heldout; train only to calibrate a "
        "recipe without looking at held-out results (the `heldout` gate never registers a model judged on train groups)",
    )
    significance_level: float = Field(
        0.01, gt=0, lt=1,
        description="the one significance level: of the paired tests (BH q < level), the detectable effect and the "
        "registration gate (gate.require_significance)",
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
    """Registration gates, against the base model and the current @champion."""

    min_relative_gap_reduction: float = Field(0.0, description="(base_gap - tuned_gap) / base_gap must be >= this")
    require_significance: bool = Field(
        True,
        description="the BH-adjusted q of the paired test on the headline gap must be <= eval.significance_level "
        "(recorded in metrics.json as consistency.alpha) and the gap must fall; false disables",
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
    max_heldout_instruction_drop: float | None = Field(
        0.05,
        ge=0,
        le=1,
        description="base - tuned strict compliance on the held-out instruction families (data.instructions: families) <= this (null: off)",
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
