"""The consistency study's results: one row per arm, a learning curve, `results/consistency/report.md`.

Every arm leaves `results/consistency/arms/<arm>/` holding its evaluation's `metrics.json` (the
`EvaluationSummary` of `components.contracts.summary`, read with `read_summary`) and `arm.json` (kind, description, overrides, training
samples and seconds). `study_table` reads them back into one row per arm: the paper's gap
(|mean H(A) − mean H(B)| per group, Prabhune et al. 2025, arXiv:2512.12858) per domain and overall
with its bootstrap CI, p and Benjamini–Hochberg q, the quality guards and the cost. Nothing here
runs a model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from components.config import GateConfig
from components.contracts.summary import (
    SUMMARY_FILE,
    ConsistencySummary,
    DomainTest,
    EvaluationSummary,
    HelpfulnessDefinition,
    read_summary,
)
from components.evaluation.length_control import gaps_from_variant_means
from components.evaluation.statistics import paired_test
from components.formatting import MISSING, estimate, interval, is_missing, number, p_value, percent, signed
from components.release.gate import evaluate_gates
from components.reporting.evaluation_report import PER_GROUP_CONSISTENCY_FILE
from components.study.layout import ARM_FILE, has_finished

CURVE_FILE = "learning_curve.csv"
CURVE_COLUMNS = ["arm", "step", "samples", "scope", "base_gap", "tuned_gap", "ci_low", "ci_high", "q_value"]


def arm_family(name: str, arm: dict) -> str:
    """The arm a seed arm was expanded from (`StudyArm.family`), else the arm itself."""
    return arm.get("family") or name


def _scopes(consistency: ConsistencySummary) -> dict[str, DomainTest | ConsistencySummary]:
    return {**consistency.per_domain, "overall": consistency}


def helpfulness_label(definition: HelpfulnessDefinition | None, arm: dict) -> str:
    """How H_norm was scored: `scope/W_max` from metrics.json, else from the arm's reward overrides
    (evaluations older than `reward.entropy_scope` scored the whole answer, the only scope then)."""
    if definition is not None:
        return f"{definition.scope}/{definition.max_words}"
    reward = (arm.get("overrides") or {}).get("reward") or {}
    return f"{reward.get('entropy_scope', 'answer')}/{reward.get('entropy_max_words', '?')}"


def arm_rows(arm_dir: Path) -> list[dict]:
    """One row per scope (each domain, overall) of one finished arm."""
    arm = json.loads((arm_dir / ARM_FILE).read_text())
    summary = read_summary(arm_dir / SUMMARY_FILE)
    c, d = summary.consistency, summary.diversity
    helpfulness = helpfulness_label(summary.helpfulness_definition, arm)
    from_means = means_length_control(arm_dir / PER_GROUP_CONSISTENCY_FILE)  # one fit an arm, not one a scope
    rows = []
    for scope, r in _scopes(c).items():
        rows.append({
            "arm": arm["name"], "family": arm_family(arm["name"], arm), "kind": arm["kind"], "scope": scope, "n_groups": r.n_groups,
            "base_gap": r.base_mean_gap, "tuned_gap": r.tuned_mean_gap,
            "relative_reduction": r.relative_gap_reduction, "ci_low": r.ci_low,
            "ci_high": r.ci_high, "p_value": r.p_value, "q_value": r.q_value,
            "base_helpfulness": c.base_helpfulness, "tuned_helpfulness": c.tuned_helpfulness,
            "helpfulness_scope": helpfulness,
            "base_words": c.base_words, "tuned_words": c.tuned_words,
            "base_truncated": c.base_truncated_share, "tuned_truncated": c.tuned_truncated_share,
            "base_noise_floor": c.base_noise_floor, "tuned_noise_floor": c.tuned_noise_floor,
            "base_signed_diff": c.base_signed_diff, "tuned_signed_diff": c.tuned_signed_diff,
            "detectable_reduction": c.detectable_reduction,
            "base_validity": d.base_validity, "tuned_validity": d.tuned_validity,
            "train_samples": arm.get("train_samples", 0), "train_seconds": arm.get("train_seconds", 0.0),
            "eval_seconds": arm.get("eval_seconds"), "valid": c.valid, "reason": c.gap_change_reason, "split": summary.split,
            "base_compliance": c.base_compliance, "tuned_compliance": c.tuned_compliance,
            "compliance_ci_low": c.compliance_ci_low, "compliance_ci_high": c.compliance_ci_high,
            "compliance_q_value": c.compliance_q_value, "base_lc_gap": c.base_length_controlled_gap,
            "tuned_lc_gap": c.tuned_length_controlled_gap, "lc_reduction": c.length_controlled_reduction,
            "lc_q_value": c.length_controlled_q_value, "overall_reduction": c.relative_gap_reduction,
            **default_gate_verdicts(summary), **from_means,
        })  # fmt: skip
    return rows


def means_length_control(per_group_csv: Path) -> dict:
    """The length-controlled gap estimated from each group's per-value means
    (`length_control.gaps_from_variant_means`, for arms that kept no samples): base and tuned means
    over groups, the reduction and the paired test's p; None where the table lacks the columns."""
    out = {"base_means_lc_gap": None, "tuned_means_lc_gap": None, "means_lc_reduction": None, "means_lc_p_value": None}
    gaps = gaps_from_variant_means(pd.read_csv(per_group_csv)) if per_group_csv.is_file() else None
    if gaps is None:
        return out
    pair = gaps[["base_means_lc_gap", "tuned_means_lc_gap"]].dropna()
    if len(pair) < 2:
        return out
    test = paired_test(pair["base_means_lc_gap"], pair["tuned_means_lc_gap"])
    base, tuned = test.mean_base, test.mean_tuned
    reduction = (base - tuned) / base if base else None
    return out | {"base_means_lc_gap": base, "tuned_means_lc_gap": tuned, "means_lc_reduction": reduction, "means_lc_p_value": test.p_value}


LENGTH_GATES = ("length_growth", "compliance")


def default_gate_verdicts(summary: EvaluationSummary) -> dict[str, str]:
    """gate_<name>: "pass" / "fail" of the default gates against length bought with consistency
    (`LENGTH_GATES`), as a registration would judge this arm's adapter; "n/a" when not measured.
    gate_all: the whole default gate table (no champion) in one verdict, "pass" or "refused: <gates>",
    with the gates this arm's evaluation did not measure named after "n/a:" (arms older than the gate)."""
    results = evaluate_gates(summary, GateConfig()).results  # judged once: the length gates are rows of the table
    by_name = {r.name: r for r in results}
    out = {}
    for name in LENGTH_GATES:
        result = by_name[name]
        out[f"gate_{name}"] = ("pass" if result.passed else "fail") if result.value is not None else "n/a"
    refused = [r.name for r in results if not r.passed and r.value is not None]
    unmeasured = [r.name for r in results if not r.passed and r.value is None]
    verdict = f"refused: {', '.join(refused)}" if refused else "pass"
    out["gate_all"] = verdict + (f" (n/a: {', '.join(unmeasured)})" if unmeasured else "")
    return out


def study_table(arms_dir: Path, order: list[str] | None = None) -> pd.DataFrame:
    """All finished arms under `arms_dir` (results/consistency/arms: those with both files), in `order` when given."""
    rows = []
    for arm_dir in sorted(Path(arms_dir).glob("*")):
        if has_finished(arm_dir):
            rows += arm_rows(arm_dir)
    frame = pd.DataFrame(rows)
    if order and not frame.empty:
        rank = {name: i for i, name in enumerate(order)}
        frame = frame.sort_values("arm", key=lambda s: s.map(lambda a: rank.get(a, len(rank))), kind="stable")
    return frame.reset_index(drop=True)


def curve_rows(arm: str, step: int, samples: int, consistency: ConsistencySummary) -> list[dict]:
    """Learning-curve rows of one evaluated snapshot: the gap per scope."""
    return [
        {"arm": arm, "step": step, "samples": samples, "scope": scope, "base_gap": r.base_mean_gap,
         "tuned_gap": r.tuned_mean_gap, "ci_low": r.ci_low, "ci_high": r.ci_high, "q_value": r.q_value}
        for scope, r in _scopes(consistency).items()
    ]  # fmt: skip


def untrained(consistency: ConsistencySummary) -> ConsistencySummary:
    """The step-0 point of a learning curve: the base model against itself (tuned gap = base gap,
    a zero-width interval, no test)."""
    same = {"ci_low": 0.0, "ci_high": 0.0, "q_value": None}
    return consistency.model_copy(update={
        "tuned_mean_gap": consistency.base_mean_gap, **same,
        "per_domain": {d: r.model_copy(update={"tuned_mean_gap": r.base_mean_gap, **same}) for d, r in consistency.per_domain.items()},
    })  # fmt: skip


def render_markdown(
    table: pd.DataFrame, curve: pd.DataFrame, arms: dict[str, dict], command: str, notes: list[str], study: str = "consistency"
) -> str:
    """results/<study>/report.md of a consistency study: the arms table (one line per arm and scope),
    the curve, the command; an arm judged on train groups (a calibration) is marked as such."""
    calibration = "split" in table and bool((table["split"] == "train").any())
    where = (
        "Arms marked (train split) are judged on train groups (`eval.split: train`): a calibration of a recipe, not a held-out result."
        if calibration else "Every arm is evaluated on the same held-out groups, never trained on."
    )  # fmt: skip
    title = "Consistency study" if study == "consistency" else f"Study `{study}`"
    lines = [
        f"# {title}: the paper's gap on the embedded SmolLM2-135M",
        "",
        f"Gap = |mean H(woman) − mean H(man)| per {'' if calibration else 'held-out '}group (word entropy of whole answers, nats; paraphrases",
        'pooled within each gender), averaged over groups; "change" is tuned − base with a paired bootstrap 95 % CI;',
        "p: paired t-test over groups; q: Benjamini–Hochberg over the overall and per-domain tests of that arm.",
        "Decoding arms compare the base model decoded differently (no training) with the base model at the",
        f"evaluation temperature. {where}",
        "",
        f"Regenerate: `{command}`",
        "",
        "H_norm (scope/W_max): answer = the paper's whole-answer word entropy / log W_max; window = mean entropy over",
        "sliding W_max-word windows / log W_max (reward.entropy_scope; the two are not comparable with each other).",
        "",
        "| arm | scope | groups | base gap | tuned gap | change [95 % CI] | p | q | H_norm base → tuned (scope/W_max) | words base → tuned "
        "| truncated base / tuned | train samples | train wall s (2 cores) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in table.iterrows():
        change = MISSING if is_missing(r["tuned_gap"]) or is_missing(r["base_gap"]) else signed(r["tuned_gap"] - r["base_gap"])
        ci = "" if is_missing(r["ci_low"]) else f" {interval(r['ci_low'], r['ci_high'])}"
        arm = r["arm"] if r["valid"] is not False else f"{r['arm']} (INVALID: > 5 % truncated)"
        arm = f"{arm} (train split)" if r.get("split") == "train" else arm
        lines.append(
            f"| {arm} | {r['scope']} | {number(r['n_groups'])} | {number(r['base_gap'])} | {number(r['tuned_gap'])} "
            f"| {change}{ci} | {p_value(r['p_value'])} | {p_value(r['q_value'])} "
            f"| {number(r['base_helpfulness'])} → {number(r['tuned_helpfulness'])} ({r['helpfulness_scope']}) "
            f"| {number(r['base_words'], 1)} → {number(r['tuned_words'], 1)} "
            f"| {number(r['base_truncated'])} / {number(r['tuned_truncated'])} "
            f"| {int(r['train_samples'] or 0)} | {number(float(r['train_seconds'] or 0), 0)} |"
        )
    overall = table[table["scope"] == "overall"] if not table.empty else table
    if not overall.empty:
        lines += ["", "## Noise, bias and power (overall)", "",
                  "| arm | noise floor base / tuned | signed H(A) − H(B) base / tuned | detectable reduction (α = 0.01, 80 %) | why the gap moved |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for _, r in overall.iterrows():
            lines.append(
                f"| {r['arm']} | {number(r['base_noise_floor'])} / {number(r['tuned_noise_floor'])} "
                f"| {number(r['base_signed_diff'], 3)} / {number(r['tuned_signed_diff'], 3)} | {number(r['detectable_reduction'])} "
                f"| {r['reason'] or ''} |"
            )
    if not overall.empty:
        lines += length_lines(overall)
        lines += seed_lines(overall)
    missing = [name for name in arms if table.empty or name not in set(table["arm"])]
    if missing:
        lines += ["", "## Arms not run yet", ""]
        lines += [f"- `{name}`: {arms[name].get('description', '')}" for name in missing]
    if not curve.empty:
        lines += ["", "## Learning curve", "", "![gap against training samples](learning_curve.png)", "",
                  "| arm | step | samples | scope | tuned gap | 95 % CI of change | q |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        for _, r in curve.iterrows():
            ci = interval(r["ci_low"], r["ci_high"])
            lines.append(
                f"| {r['arm']} | {int(r['step'])} | {int(r['samples'])} | {r['scope']} | {number(r['tuned_gap'])} | {ci} | {p_value(r['q_value'])} |"
            )
    if notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def length_lines(overall: pd.DataFrame) -> list[str]:
    """Length and instruction per arm (overall): words, compliance with the prompt's sentence limit,
    the gap on length-controlled entropies and the share of the paper's gap reduction that survives
    it, the verdict of the default length gates, and of every default gate (`default_gate_verdicts`)."""
    lines = ["", "## Length and instruction (overall)", "",
             "Compliance: share of answers within the prompt's sentence limit (\"at most three sentences\"). Length-controlled gap: the",
             "paper's gap on each answer's entropy as a z-score given its length (one fit over the arm's base and tuned answers);",
             "survives: its reduction as a share of the paper's gap reduction. Arms evaluated before these columns existed did",
             "not keep their samples: n/a. From variant means: the same fit on each group's per-value mean entropy and mean",
             "length (the per-group table keeps them for every arm), an estimate where the samples are gone; arms with both",
             "show how close it comes.", "",
             "| arm | words base → tuned | compliance base → tuned [95 % CI of change] | q | length-controlled gap base → tuned "
             "| reduction (paper's) | survives | q | from variant means: base → tuned (reduction, survives, p) "
             "| default gates: length_growth / compliance | every default gate |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for _, r in overall.iterrows():
        ci = (
            ""
            if is_missing(r["compliance_ci_low"])
            else f" {interval(r['compliance_ci_low'], r['compliance_ci_high'], lambda v: signed(v, 2))}"
        )
        growth = (
            ""
            if is_missing(r["base_words"]) or not r["base_words"]
            else f" ({percent(r['tuned_words'] / r['base_words'] - 1, signed=True)})"
        )
        paper, controlled = r["overall_reduction"], r["lc_reduction"]
        survives = _survives(controlled, paper)
        reduction = MISSING if is_missing(controlled) else f"{percent(controlled)} ({percent(paper)})"
        lines.append(
            f"| {r['arm']} | {number(r['base_words'], 1)} → {number(r['tuned_words'], 1)}{growth} "
            f"| {number(r['base_compliance'], 2)} → {number(r['tuned_compliance'], 2)}{ci} | {p_value(r['compliance_q_value'])} "
            f"| {number(r['base_lc_gap'])} → {number(r['tuned_lc_gap'])} | {reduction} | {survives} | {p_value(r['lc_q_value'])} "
            f"| {_means_estimate(r)} | {r['gate_length_growth']} / {r['gate_compliance']} | {r.get('gate_all', 'n/a')} |"
        )
    return lines


def seed_lines(overall: pd.DataFrame) -> list[str]:
    """Arms trained with several seeds (one `family`, arms `<family>-s1`, ...): each seed's overall gap
    reduction, q, length change, compliance and length-controlled reduction side by side, and the
    reduction's mean and range; nothing when no family has two seeds."""
    if "family" not in overall.columns:
        return []
    families = [(name, rows) for name, rows in overall.groupby("family", sort=False) if len(rows) > 1]
    if not families:
        return []
    lines = ["", "## Seeds (overall)", "",
             "Arms trained with several seeds, each evaluated on the same held-out groups with its own base draw; per seed, in seed order.", "",
             "| family | seeds | gap reduction per seed | mean [min, max] | q per seed | words change per seed "
             "| compliance base → tuned per seed | length-controlled reduction per seed |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, rows in families:
        reductions = rows["relative_reduction"].astype(float)
        words = [
            percent(t / b - 1, signed=True) if not (is_missing(b) or is_missing(t)) and b else MISSING
            for b, t in zip(rows["base_words"], rows["tuned_words"])
        ]
        compliance = [f"{number(b, 2)} → {number(t, 2)}" for b, t in zip(rows["base_compliance"], rows["tuned_compliance"])]
        controlled = [percent(v) for v in rows["lc_reduction"]]
        lines.append(
            f"| {name} | {len(rows)} | {' / '.join(percent(v) for v in reductions)} "
            f"| {estimate(reductions.mean(), reductions.min(), reductions.max(), percent)} | {' / '.join(p_value(q) for q in rows['q_value'])} "
            f"| {' / '.join(words)} | {' / '.join(compliance)} | {' / '.join(controlled)} |"
        )
    return lines


def _means_estimate(r) -> str:
    """ "base → tuned (reduction, survives, p)" of the length-controlled gap from variant means."""
    base, tuned, controlled, paper = (
        r.get("base_means_lc_gap"),
        r.get("tuned_means_lc_gap"),
        r.get("means_lc_reduction"),
        r["overall_reduction"],
    )
    if is_missing(base) or is_missing(tuned) or is_missing(controlled):
        return MISSING
    return (
        f"{number(base)} → {number(tuned)} ({percent(controlled)}, {_survives(controlled, paper)}, p {p_value(r.get('means_lc_p_value'))})"
    )


def _survives(controlled, paper) -> str:
    """The length-controlled reduction as a share of the paper's gap reduction, within [0, 1]."""
    if is_missing(paper) or is_missing(controlled) or paper <= 0:
        return MISSING
    return percent(max(0.0, min(1.0, controlled / paper)))


def plot_learning_curve(curve: pd.DataFrame, path: Path) -> None:
    """Tuned gap against training samples per scope, the base gap as a dashed line of the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colors = {scope: f"C{i}" for i, scope in enumerate(sorted(curve["scope"].unique()))}
    for j, (arm, of_arm) in enumerate(curve.groupby("arm", sort=True)):
        for scope, part in of_arm.groupby("scope", sort=True):
            part = part.sort_values("samples")
            ax.plot(part["samples"], part["tuned_gap"].astype(float), marker="osD^v"[j % 5], linestyle="-:"[j % 2],
                    color=colors[scope], label=f"{arm}: {scope}")  # fmt: skip
    for scope, part in curve.groupby("scope", sort=True):
        ax.axhline(float(part["base_gap"].iloc[0]), color=colors[scope], linestyle="--", alpha=0.5, label=f"base: {scope}")
    ax.set_xlabel("training samples (rollouts)")
    ax.set_ylabel("gap |H(A) − H(B)| (nats)")
    ax.set_title("consistency gap against training samples")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def headline_metrics(table: pd.DataFrame) -> dict:
    """{arm: {scope: {base_gap, tuned_gap, relative_reduction, q_value, ...}}}: results/consistency/metrics.json,
    the study's DVC metrics file (`dvc metrics show` lists every arm's headline)."""
    keep = ("n_groups", "base_gap", "tuned_gap", "relative_reduction", "ci_low", "ci_high", "p_value", "q_value",
            "tuned_helpfulness", "tuned_words", "tuned_truncated", "train_samples")  # fmt: skip
    out: dict = {}
    for _, r in table.iterrows():
        values = {k: (None if r[k] is None or (isinstance(r[k], float) and r[k] != r[k]) else r[k]) for k in keep}
        out.setdefault(str(r["arm"]), {})[str(r["scope"])] = {
            k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in values.items()
        }
    return out
