"""The evaluation summary: the one typed definition of `metrics.json`.

`evaluate` writes it (`write_summary`); the gates, the reports, the retrain flow, the study and the
registration binding read it (`read_summary`, or the `EvaluationSummary` the evaluation returns).
Every key of the file is a field here, so a renamed or misspelt key fails when the summary is
built or read, naming the file and the field, instead of at gate time.

Layout (``schema_version`` 1; a file without the key was written before this contract, same shape):

- ``split``: the groups that judged the model (``eval.split``: heldout, or train for a calibration;
  absent in files written before it existed: heldout);
- ``consistency`` (`ConsistencySummary`): the paper's gap on the variant axis, per domain and
  overall, its tests, noise floor, detectable effect, quality guards and validity;
- ``diversity`` (`DiversitySummary`): ``n_tasks`` and ``base_<m>`` / ``tuned_<m>`` per metric;
- ``notes``: why a value is null, fallbacks, invalid evaluations;
- ``candidate``, ``evaluated``, ``code``, ``helpfulness_definition``, ``engine``: what was evaluated, by
  which code (git commit, dirty flag, diff digest), with which H_norm and engine (absent in files
  written before they existed);
- ``fairness`` (`BenchmarkSummary` by benchmark name): decision benchmarks such as DiscrimEval,
  base vs tuned, a `DiscriminationScore` per demographic (absent when none was evaluated);
- ``bbq`` (`BbqSummary`): BBQ's accuracy and bias scores, base vs tuned (absent when not evaluated;
  no gate reads it).

Required and optional. A required field must be present (its value may still be null: an empty
evaluation has null means). An optional field may be absent, and stays absent: `to_dict` returns
what was read (``exclude_unset``), so a file written before ``q_value`` existed is still judged on
its ``p_value`` and every committed file round-trips unchanged.

One name, two sections: words per response is ``words`` in both sections (``base_words``,
``tuned_words``); consistency writes it under its historical key ``base_mean_words`` /
``tuned_mean_words`` (the key of `dvc metrics diff` history, MLflow metrics and registered
versions' ``metric.*`` tags) and reads both spellings.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from components.contracts.atomic import atomic_write_text
from components.contracts.errors import UserError

SCHEMA_VERSION = 1
SUMMARY_FILE = "metrics.json"
MODELS = ("base", "tuned")


class SummaryError(UserError, ValueError):
    """metrics.json (or a summary being built) does not fit the contract; the message names the
    file and every offending field."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=True)

    def to_dict(self) -> dict[str, Any]:
        """As in metrics.json: file keys, fields absent when read stay absent."""
        return self.model_dump(mode="python", by_alias=True, exclude_unset=True)

    @classmethod
    def key(cls, field: str) -> str:
        """The key `field` has in metrics.json (its alias, else its name); KeyError naming the
        section's fields when it has no such field."""
        try:
            info = cls.model_fields[field]
        except KeyError:
            raise KeyError(f"{cls.__name__} has no field {field!r}; fields: {sorted(cls.model_fields)}") from None
        return info.serialization_alias or info.alias or field


def _words(model: str) -> Any:
    """`<model>_words`, written as `<model>_mean_words` (read under either key)."""
    return Field(
        validation_alias=AliasChoices(f"{model}_mean_words", f"{model}_words"),
        serialization_alias=f"{model}_mean_words",
    )


class DomainTest(_Record):
    """The headline test on one domain's groups (`consistency.per_domain.<domain>`)."""

    n_groups: int
    base_mean_gap: float | None
    tuned_mean_gap: float | None
    relative_gap_reduction: float | None = None
    t_statistic: float | None = None
    p_value: float | None = None
    p_value_wilcoxon: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    q_value: float | None = None  # BH over the overall and per-domain tests


class ConsistencySummary(_Record):
    """Held-out consistency groups, base vs tuned (`components.evaluation.summary.summarize`).

    gap = |mean H(A) − mean H(B)| per group on ``axis`` (Prabhune et al. 2025, arXiv:2512.12858);
    base/tuned_mean_gap its mean over groups; relative_gap_reduction = (base − tuned) / base;
    p_value / t_statistic: paired t-test, q_value: Benjamini–Hochberg over overall and per-domain
    tests; ci_low / ci_high: bootstrap CI of tuned − base. Other base/tuned pairs are group means
    of the per-group columns of the same name.
    """

    axis: str | None = None
    n_groups: int
    base_mean_gap: float | None
    tuned_mean_gap: float | None
    relative_gap_reduction: float | None
    t_statistic: float | None = None
    p_value: float | None
    p_value_wilcoxon: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    q_value: float | None = None  # absent in files written before BH: the gate judges p_value then
    significant: bool | None = None
    per_domain: dict[str, DomainTest] = Field(default_factory=dict)
    base_any_variant_gap: float | None = None
    tuned_any_variant_gap: float | None = None
    base_noise_floor: float | None = None
    tuned_noise_floor: float | None = None
    base_excess_gap: float | None = None
    tuned_excess_gap: float | None = None
    base_within_variant_sd: float | None = None
    tuned_within_variant_sd: float | None = None
    base_helpfulness: float | None
    tuned_helpfulness: float | None
    base_semantic_agreement: float | None = None
    tuned_semantic_agreement: float | None = None
    base_cross_variant_cosine: float | None = None
    tuned_cross_variant_cosine: float | None = None
    base_empty_rate: float | None
    tuned_empty_rate: float | None
    base_words: float | None = _words("base")
    tuned_words: float | None = _words("tuned")
    n_paraphrased_groups: int | None = None
    base_paraphrase_gap: float | None = None
    tuned_paraphrase_gap: float | None = None
    base_signed_diff: float | None = None
    base_signed_diff_p: float | None = None
    tuned_signed_diff: float | None = None
    tuned_signed_diff_p: float | None = None
    gap_change_reason: str | None = None
    detectable_reduction: float | None = None
    detectable_relative_reduction: float | None = None
    observed_detectable_reduction: float | None = None
    power: float | None = None
    alpha: float | None = None
    # absent truncation shares are the gate's to judge (an evaluation that did not record them cannot register)
    base_truncated_share: float | None = None
    tuned_truncated_share: float | None = None
    max_new_tokens: int | None = None
    valid: bool | None = None
    invalid_reason: str | None = None
    # instruction compliance and length (absent in files written before they existed): sentences per
    # answer; compliance = share of answers within the sentence limit N (max_sentences) their prompt
    # states; its paired change tuned − base with CI, p and BH q; the gap on length-controlled
    # entropies (`evaluation.length_control`) with its relative reduction, CI, p and q
    max_sentences: int | None = None
    base_sentences: float | None = None
    tuned_sentences: float | None = None
    base_compliance: float | None = None
    tuned_compliance: float | None = None
    compliance_change: float | None = None
    compliance_ci_low: float | None = None
    compliance_ci_high: float | None = None
    compliance_p_value: float | None = None
    compliance_q_value: float | None = None
    base_length_controlled_gap: float | None = None
    tuned_length_controlled_gap: float | None = None
    length_controlled_reduction: float | None = None
    length_controlled_ci_low: float | None = None
    length_controlled_ci_high: float | None = None
    length_controlled_p_value: float | None = None
    length_controlled_q_value: float | None = None


class DiversitySummary(_Record):
    """Held-out diversity tasks: task means of the per-task columns, null when ``n_tasks`` is 0."""

    n_tasks: int
    base_distinct_1: float | None = None
    tuned_distinct_1: float | None = None
    base_distinct_2: float | None = None
    tuned_distinct_2: float | None = None
    base_self_bleu: float | None = None
    tuned_self_bleu: float | None = None
    base_vendi: float | None = None
    tuned_vendi: float | None = None
    base_semantic_entropy: float | None = None
    tuned_semantic_entropy: float | None = None
    base_n_clusters: float | None = None
    tuned_n_clusters: float | None = None
    base_validity: float | None = None
    tuned_validity: float | None = None
    base_coverage: float | None = None
    tuned_coverage: float | None = None
    base_all_valid: float | None = None  # absent in files written before it existed
    tuned_all_valid: float | None = None
    base_unique_at_n: float | None = None
    tuned_unique_at_n: float | None = None
    base_tv_to_uniform: float | None = None
    tuned_tv_to_uniform: float | None = None
    base_kl_to_uniform: float | None = None
    tuned_kl_to_uniform: float | None = None
    base_js_to_uniform: float | None = None
    tuned_js_to_uniform: float | None = None
    base_helpfulness: float | None = None
    tuned_helpfulness: float | None = None
    base_words: float | None = None
    tuned_words: float | None = None
    base_empty_rate: float | None = None
    tuned_empty_rate: float | None = None


class DiscriminationScore(_Record):
    """One demographic against its baseline on a decision benchmark, in log-odds of "yes"
    (`components.evaluation.discrimination`): <model>_score and its CI / p-value from the mixed
    model; <model>_paired_* the matched paired difference (questions as units); delta the paired
    change tuned − base of the per-question effects, its CI, p and BH q (``fairness`` family)."""

    axis: str
    value: str
    baseline: str
    n_pairs: int
    n_questions: int
    base_score: float | None
    base_ci_low: float | None = None
    base_ci_high: float | None = None
    base_p_value: float | None = None
    tuned_score: float | None
    tuned_ci_low: float | None = None
    tuned_ci_high: float | None = None
    tuned_p_value: float | None = None
    base_paired_diff: float | None = None
    base_paired_ci_low: float | None = None
    base_paired_ci_high: float | None = None
    tuned_paired_diff: float | None = None
    tuned_paired_ci_low: float | None = None
    tuned_paired_ci_high: float | None = None
    delta: float | None = None
    delta_ci_low: float | None = None
    delta_ci_high: float | None = None
    delta_p_value: float | None = None
    delta_q_value: float | None = None


class BenchmarkSummary(_Record):
    """A decision benchmark, base vs tuned (`fairness.<benchmark>`): which prompts, how the scores
    were fitted (``method``), the decision's mean log-odds, share of "yes" (log-odds > 0) and mean
    p(yes | yes or no), Spearman's ρ of the per-question profile, and a score per demographic;
    ``gated``: the score keys the fairness gate judges."""

    benchmark: str
    split: str
    n_questions: int
    n_prompts: int
    question_ids: list[int]
    ages: list[int]
    races: list[str]
    method: str
    gated: list[str]
    base_mean_logit: float | None
    tuned_mean_logit: float | None
    base_yes_share: float | None
    tuned_yes_share: float | None
    base_p_yes: float | None = None
    tuned_p_yes: float | None = None
    profile_correlation: float | None = None
    scores: dict[str, DiscriminationScore] = Field(default_factory=dict)


class BbqScore(_Record):
    """One BBQ metric (`components.evaluation.bbq_scores`): each model's value with its bootstrap
    CI, and tuned − base with its paired bootstrap CI (items resampled, the same for both models)."""

    base: float | None
    base_ci_low: float | None = None
    base_ci_high: float | None = None
    tuned: float | None
    tuned_ci_low: float | None = None
    tuned_ci_high: float | None = None
    delta: float | None = None
    delta_ci_low: float | None = None
    delta_ci_high: float | None = None


class BbqSummary(_Record):
    """BBQ (Parrish et al. 2022), base vs tuned (``bbq``): which items (``n_items``, of them
    ``n_ambiguous`` and ``n_disambiguated``, from ``n_templates`` templates, the fixed subset drawn
    with ``subset_seed``), how the answer was read (``scoring``), and per metric a `BbqScore`:
    accuracy and the bias score s_DIS in disambiguated contexts, accuracy and s_AMB in ambiguous ones
    (bias scores on [−1, 1]: +1 every non-unknown answer follows the social bias, −1 every one goes
    against it), and the share of "unknown" answers in each. No gate reads it."""

    benchmark: str
    category: str
    split: str
    scoring: str
    n_items: int
    n_ambiguous: int
    n_disambiguated: int
    n_templates: int
    subset_seed: int
    chance_accuracy: float  # 1/3: three options
    confidence_level: float
    disambig_accuracy: BbqScore
    disambig_bias: BbqScore
    ambig_accuracy: BbqScore
    ambig_bias: BbqScore
    disambig_unknown_share: BbqScore
    ambig_unknown_share: BbqScore

    def at_chance(self, model: str) -> bool | None:
        """Whether `model`'s disambiguated accuracy is not above chance: its CI reaches down to
        `chance_accuracy` (None when it has no CI)."""
        low = getattr(self.disambig_accuracy, f"{model}_ci_low")
        return None if low is None else low <= self.chance_accuracy


class FamilyCompliance(_Record):
    """One instruction family's compliance (or a split's, pooled), base vs tuned, strict and loose:
    group means, the paired change tuned − base with its bootstrap CI and t-test p
    (`components.evaluation.instruction_following`)."""

    family: str
    split: Literal["train", "heldout"]
    n_groups: int
    base_strict: float
    tuned_strict: float
    strict_change: float
    strict_ci_low: float | None = None
    strict_ci_high: float | None = None
    strict_p_value: float | None = None
    base_loose: float
    tuned_loose: float
    loose_change: float
    loose_ci_low: float | None = None
    loose_ci_high: float | None = None
    loose_p_value: float | None = None


class InstructionSummary(_Record):
    """`instructions` of metrics.json: each family, the train and the held-out families pooled, and
    the words of answers to prompts that ask for nothing."""

    families: list[FamilyCompliance] = Field(default_factory=list)
    train: FamilyCompliance | None = None
    heldout: FamilyCompliance | None = None
    uninstructed: dict[str, Any] | None = None  # n_groups, base_words, tuned_words, words_change_ci


class Candidate(_Record):
    """What was compared with the base model (`eval.candidate` of params.yaml)."""

    source: str = "adapter"  # adapter | base
    temperature: float | None = None
    seed_offset: int = 0


class EvaluatedFiles(_Record):
    """SHA-256 of what the evaluation read (`components.release.binding.EvaluationBinding`)."""

    adapter_sha256: str | None  # None: the candidate was the base model itself
    base_weights_sha256: str
    params_sha256: str


class CodeRecord(_Record):
    """The code that evaluated (`components.code_version.CodeVersion`): git commit, dirty flag, diff digest."""

    commit: str
    dirty: bool | None = None
    diff_sha256: str | None = None


class HelpfulnessDefinition(_Record):
    """How H_norm was scored: `reward.entropy_scope` and `reward.entropy_max_words`."""

    scope: str
    max_words: int


class EngineRecord(_Record):
    """Which generation engine produced the samples, and why a fallback was used."""

    requested: str
    used: str
    fallback: bool = False
    fallback_reason: str = ""


SECTIONS: dict[str, type[_Record]] = {"consistency": ConsistencySummary, "diversity": DiversitySummary}


def metric_path(section: str, field: str) -> str:
    """'consistency.base_mean_words': the dotted metrics.json path of a section's field, the name
    of its `metric.*` version tag; KeyError naming the section's fields when it has no such field."""
    return f"{section}.{SECTIONS[section].key(field)}"


class EvaluationSummary(_Record):
    """metrics.json: see the module docstring."""

    schema_version: int = SCHEMA_VERSION
    split: Literal["heldout", "train"] = "heldout"  # eval.split: the groups that judged the model (absent in older files: heldout)
    consistency: ConsistencySummary
    diversity: DiversitySummary
    notes: list[str] = Field(default_factory=list)
    candidate: Candidate | None = None
    evaluated: EvaluatedFiles | None = None
    code: CodeRecord | None = None  # absent in files written before it existed
    helpfulness_definition: HelpfulnessDefinition | None = None
    engine: EngineRecord | None = None
    fairness: dict[str, BenchmarkSummary] = Field(default_factory=dict)  # by benchmark name; absent: none evaluated
    bbq: BbqSummary | None = None  # absent: BBQ not evaluated
    instructions: InstructionSummary | None = None  # absent: no group was given a family's instruction

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "evaluation summary") -> "EvaluationSummary":
        """Validate a metrics.json dict; SummaryError naming `source` and every bad field."""
        if not isinstance(data, Mapping):
            raise SummaryError(f"{source}: not an evaluation summary (a JSON object), got {type(data).__name__}")
        version = data.get("schema_version", SCHEMA_VERSION)
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise SummaryError(
                f"{source}: schema_version {version} is newer than this groupwise reads ({SCHEMA_VERSION}); update groupwise"
            )
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise SummaryError(f"{source}: not an evaluation summary (schema_version {SCHEMA_VERSION}): {_problems(exc)}") from None

    def numbers(self) -> dict[str, float]:
        """Every finite number (not a bool, not inside a list) by dotted path, 'consistency.p_value';
        the metrics, so not schema_version."""
        return finite_numbers({k: v for k, v in self.to_dict().items() if k != "schema_version"})


def _problems(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ""
        for part in error["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        parts.append(f"{where or '(top level)'}: {error['msg']}")
    return "; ".join(parts)


def leaves(obj: object, path: str = "") -> Iterator[tuple[str, object]]:
    """(dotted path, value) of every leaf of nested dicts and lists: 'a.b', 'notes[1]'."""
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield from leaves(value, f"{path}[{index}]")
    else:
        yield path, obj


def finite_numbers(tree: Mapping[str, Any]) -> dict[str, float]:
    """Finite real numbers of a nested dict by dotted path; bools and list items left out."""
    out = {}
    for path, value in leaves(tree):
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and "[" not in path and math.isfinite(value):
            out[path] = float(value)
    return out


def summary_json(summary: EvaluationSummary) -> str:
    """The text of metrics.json, stamped with the current schema_version; ValueError on a NaN or
    infinite number (metrics.json holds none: a null with a note instead)."""
    content = {k: v for k, v in summary.to_dict().items() if k != "schema_version"}
    return json.dumps({"schema_version": SCHEMA_VERSION, **content}, indent=2, allow_nan=False) + "\n"


def write_summary(path: Path, summary: EvaluationSummary) -> Path:
    """Write metrics.json atomically (`contracts.atomic`: a temporary sibling renamed into place, mode
    0644); raises ValueError before touching `path` when `summary_json` does."""
    return atomic_write_text(Path(path), summary_json(summary))


def read_summary(path: Path) -> EvaluationSummary:
    """metrics.json as an `EvaluationSummary`; SummaryError naming the file and the field when a
    key is missing, misspelt, of the wrong type, or the file is not JSON."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SummaryError(f"{path}: not JSON ({exc})") from None
    return EvaluationSummary.from_dict(data, source=str(path))
