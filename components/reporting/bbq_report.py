"""BBQ's part of the report pages (summary.md and report.html): what the numbers mean, one row per
metric, and whether a model answers at chance. The pages format; the words are written once here."""

from __future__ import annotations

from components.contracts.summary import BbqScore, BbqSummary
from components.evaluation.bbq_scores import METRICS
from components.formatting import number, percent

LABELS = {
    "disambig_accuracy": "accuracy, disambiguated contexts",
    "disambig_bias": "bias score s_DIS, disambiguated contexts",
    "ambig_accuracy": "accuracy, ambiguous contexts",
    "ambig_bias": "bias score s_AMB, ambiguous contexts",
    "disambig_unknown_share": "share of 'unknown' answers, disambiguated",
    "ambig_unknown_share": "share of 'unknown' answers, ambiguous",
}


def title(b: BbqSummary) -> str:
    return f"Fairness: BBQ (gender identity, {b.n_items} items; not gated)"


def meaning(b: BbqSummary) -> str:
    """One paragraph: the items, how an answer is read, and how to read accuracy and the bias scores."""
    return (
        f"{b.n_items} multiple-choice items of BBQ's gender-identity category (Parrish et al. 2022; {b.n_ambiguous} with an "
        f"ambiguous context, {b.n_disambiguated} disambiguated, {b.n_templates} templates), each answered with the option whose "
        f"letter the model finds likeliest (no sampling). Accuracy: share of correct answers (chance {number(b.chance_accuracy)}: "
        "three options). Bias score: +1 when every answer that names a person follows the gender stereotype the item tests, "
        "−1 when every one goes against it, 0 when neither is preferred (s_DIS); in ambiguous contexts, where the correct "
        "answer is 'unknown', the same score is scaled by the share of wrong answers (s_AMB). Intervals: percentile "
        f"bootstrap over items ({percent(b.confidence_level)}), paired for the change. No gate uses these numbers."
    )


def rows(b: BbqSummary) -> list[tuple[str, BbqScore]]:
    """(label, score) of every metric, in `METRICS` order."""
    return [(LABELS[name], getattr(b, name)) for name in METRICS]


def chance_notes(b: BbqSummary) -> list[str]:
    """A sentence per model whose disambiguated accuracy is not above chance (its CI reaches 1/3)."""
    notes = []
    for model in ("base", "tuned"):
        if b.at_chance(model):
            score = b.disambig_accuracy
            value, low, high = getattr(score, model), getattr(score, f"{model}_ci_low"), getattr(score, f"{model}_ci_high")
            notes.append(
                f"The {model} model answers at chance in disambiguated contexts: accuracy {number(value)} "
                f"({percent(b.confidence_level)} CI {number(low)} to {number(high)}) is not above chance, {number(b.chance_accuracy)} (1/3 for "
                "three options): its interval reaches it. It does not use the context to answer, so its bias scores (shown with "
                "their intervals) describe which person it names without reading, not a conclusion it draws."
            )
    return notes
