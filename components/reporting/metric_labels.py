"""Readable names for the summary's metrics: a label, a one-line definition and the better direction.

The report pages show these instead of raw keys (`base_<key>` / `tuned_<key>` of metrics.json); a key
without an entry is shown as is, so a new metric never disappears from the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["lower", "higher", "closer to 0", "context"]


@dataclass(frozen=True)
class MetricLabel:
    label: str
    definition: str
    better: Direction


CONSISTENCY: dict[str, MetricLabel] = {
    "mean_gap": MetricLabel(
        "gender gap (paper)", "|mean H(A) − mean H(B)| per group on the variant axis, averaged over groups (nats)", "lower"
    ),
    "any_variant_gap": MetricLabel(
        "any-variant gap", "max − min of the variants' mean entropy per group (mixes paraphrase and axis differences)", "lower"
    ),
    "paraphrase_gap": MetricLabel("paraphrase gap", "entropy gap between paraphrases of the same axis value", "lower"),
    "noise_floor": MetricLabel(
        "noise floor", "the gap two identical distributions would show at this K, from each group's own spread", "context"
    ),
    "excess_gap": MetricLabel("gap above the noise floor", "gap − noise floor: the part sampling noise does not explain", "lower"),
    "signed_diff": MetricLabel("signed A − B difference", "mean H(A) − mean H(B) across groups: a systematic bias, if any", "closer to 0"),
    "signed_diff_p": MetricLabel("bias test p", "one-sample t-test of the signed difference against 0", "context"),
    "within_variant_sd": MetricLabel("within-variant spread", "mean sd of the answers' entropy among one variant's samples", "context"),
    "helpfulness": MetricLabel("helpfulness H_norm", "normalised word entropy of the answers (the reward's scope)", "higher"),
    "mean_words": MetricLabel("words per answer", "mean answer length in words", "context"),
    "sentences": MetricLabel("sentences per answer", "mean sentences per answer (list items and lines count as sentences)", "context"),
    "compliance": MetricLabel(
        "instruction compliance", 'share of answers within the sentence limit their prompt states ("at most three sentences")', "higher"
    ),
    "length_controlled_gap": MetricLabel(
        "length-controlled gap", "the paper's gap on entropies made comparable across answer lengths (z-scores given the length)", "lower"
    ),
    "empty_rate": MetricLabel("empty answers", "share of answers with no words", "lower"),
    "truncated_share": MetricLabel(
        "truncated answers", "share of answers cut at max_new_tokens (over 5 %: the evaluation is invalid)", "lower"
    ),
    "semantic_agreement": MetricLabel("semantic agreement", "share of the group's samples in its most common meaning cluster", "higher"),
    "cross_variant_cosine": MetricLabel(
        "cross-variant similarity", "mean embedding cosine between answers to different variants", "higher"
    ),
}

DIVERSITY: dict[str, MetricLabel] = {
    "validity": MetricLabel("valid answers", "share of answers in the task's valid set", "higher"),
    "coverage": MetricLabel("coverage of the valid set", "|answers ∩ valid set| / |valid set| over the K samples (GAPO)", "higher"),
    "all_valid": MetricLabel("all options named", "share of tasks whose K samples name every valid answer (GAPO)", "higher"),
    "js_to_uniform": MetricLabel(
        "JS to uniform", "Jensen–Shannon divergence of the answer frequencies from uniform over the valid set", "lower"
    ),
    "kl_to_uniform": MetricLabel("KL to uniform", "KL divergence of the answer frequencies from uniform", "lower"),
    "tv_to_uniform": MetricLabel("TV to uniform", "total variation distance of the answer frequencies from uniform", "lower"),
    "unique_at_n": MetricLabel("Unique@N", "distinct valid answers among the N samples", "higher"),
    "n_clusters": MetricLabel("meaning clusters", "number of embedding clusters among the samples", "higher"),
    "semantic_entropy": MetricLabel("semantic entropy", "entropy over the samples' meaning clusters (nats)", "higher"),
    "vendi": MetricLabel("Vendi score", "effective number of distinct samples (embedding kernel)", "higher"),
    "self_bleu": MetricLabel("self-BLEU", "mean BLEU of each sample against the others", "lower"),
    "distinct_1": MetricLabel("distinct-1", "distinct words / words", "higher"),
    "distinct_2": MetricLabel("distinct-2", "distinct word pairs / word pairs", "higher"),
    "helpfulness": MetricLabel("helpfulness H_norm", "normalised word entropy of the answers", "higher"),
    "words": MetricLabel("words per answer", "mean answer length in words", "context"),
    "empty_rate": MetricLabel("empty answers", "share of answers with no words", "lower"),
}

SECTIONS: dict[str, dict[str, MetricLabel]] = {"consistency": CONSISTENCY, "diversity": DIVERSITY}


def label(section: str, key: str) -> MetricLabel:
    """The label of `key` in `section` (the key itself, no definition, when unknown)."""
    return SECTIONS.get(section, {}).get(key, MetricLabel(key, "", "context"))
