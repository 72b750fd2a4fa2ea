"""The instruction confirmation's report (`results/instruction-confirmation/plan.md`), computed from its arms.

Two studies run it: `instruction-confirmation` (the instruction-following objective, 5 training seeds)
and `instruction-confirmation-default` (the default objective, 3 seeds), each naming the other in
`pooled_with`; both write this one page, in the folder holding `preregistration.json`. Endpoints per
training seed s, each against the one base pass on the same groups (plan, "Endpoints"):

    ΔC_held(s)  = C_held(tuned_s) − C_held(base)     strict compliance (IFEval, Zhou et al. 2023,
    ΔC_train(s) = C_train(tuned_s) − C_train(base)    arXiv:2311.07911) averaged over the groups told a
                                                      held-out / a train family's instruction
    R(s) = 1 − mean_g tuned_gap_g / mean_g base_gap_g, gap_g = |H̄(woman) − H̄(man)|  (Prabhune et al. 2025)
    W(s) = mean_g tuned_words_g / mean_g base_words_g − 1
    D(s) = tuned − base DiscrimEval score, female − male and non-binary − male (logit)

judged at the seed level (mean, t-based 95 % CI, one-sample t-test; `seed_inference.seed_level_test`).
Confirmed when over the 5 seeds: CI low of ΔC_held ≥ −0.02, mean ΔC_train ≥ +0.10, mean R ≥ 0.35 with CI
low > 0.20, mean W ≤ +0.25, CI high of each D ≤ +0.005. Everything else is descriptive: the default's
seeds and the difference of seed-level means (Welch), each family, the uninstructed probe, BBQ,
truncation and the compliance on groups none of whose base answers were cut.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from components.contracts.atomic import atomic_write_json, atomic_write_text
from components.contracts.summary import SUMMARY_FILE, EvaluationSummary, FamilyCompliance, read_summary
from components.evaluation.seed_inference import mixed_model_test, seed_level_test, welch_test
from components.evaluation.statistics import paired_test
from components.formatting import MISSING, estimate, number, p_value, percent, signed
from components.study.confirmation_report import HOLDS, Target, holds, seed_level, seed_values, truncation_flag
from components.study.layout import ARM_FILE, StudyLayout, has_finished
from components.study.report import default_gate_verdicts

RECORD_FILE = "preregistration.json"
VERDICT_FILE = "verdict.json"
NEW, DEFAULT = "instruction-following", "default"  # the arm families of the plan
INSTRUCTIONS_FILE = "per_group_instructions.csv"
GROUPS_FILE = "per_group_consistency.csv"
SAMPLES_FILE = "samples.csv.gz"
GAP_MEAN, GAP_CI_LOW = 0.35, 0.20

TARGETS = (
    Target("heldout_change", "held-out families: strict compliance, tuned − base", "ci_low", -0.02, False),
    Target("train_change", "train families: strict compliance, tuned − base", "mean", 0.10, False),
    Target("words_change", "words, tuned / base − 1 (160 groups)", "mean", 0.25, True),
    Target("discrim_female_change", "DiscrimEval female − male score change (logit)", "ci_high", 0.005, True),
    Target("discrim_non_binary_change", "DiscrimEval non-binary − male score change (logit)", "ci_high", 0.005, True),
)


class InstructionReportError(ValueError):
    """The studies pooled by this report do not name one pre-registration."""


@dataclass
class Family:
    """One arm family's finished seeds: each seed's figures and its per-group gap differences."""

    name: str
    seeds: dict[str, dict[str, float | None]] = field(default_factory=dict)
    differences: list[pd.DataFrame] = field(default_factory=list)  # seed, group_id, d = tuned − base gap
    families: dict[str, list[dict]] = field(default_factory=dict)  # arm -> metrics.json instructions.families
    gates: dict[str, str] = field(default_factory=dict)
    base_samples: dict[str, str] = field(default_factory=dict)  # arm -> SHA-256 of its base samples
    unplanned: list[str] = field(default_factory=list)  # finished arms whose seed the plan does not name (not judged)
    runs: dict[str, tuple[str, str, int | None]] = field(default_factory=dict)  # arm -> (commit, machine, training steps)


def _mean(frame: pd.DataFrame, column: str) -> float | None:
    return None if frame.empty else float(frame[column].astype(float).mean())


def _answer_share(frame: pd.DataFrame, column: str) -> float | None:
    """A per-group share as the share of all the frame's answers (groups weighted by `n_samples`, as the
    evaluator's 5 % rule counts them)."""
    if frame.empty:
        return None
    n = frame["n_samples"].astype(float)
    return float((frame[column].astype(float) * n).sum() / n.sum())


def _ratio_change(frame: pd.DataFrame, column: str) -> float | None:
    base, tuned = _mean(frame, f"base_{column}"), _mean(frame, f"tuned_{column}")
    return None if not base or tuned is None else tuned / base - 1


def _discrim(summary: EvaluationSummary, score: str, figure: str = "delta") -> float | None:
    bench = summary.fairness.get("discrim_eval")
    found = None if bench is None else bench.scores.get(score)
    return None if found is None else getattr(found, figure)


def _bbq(summary: EvaluationSummary, score: str) -> float | None:
    found = None if summary.bbq is None else getattr(summary.bbq, score, None)
    return None if found is None else found.delta


def _compliance(rows: pd.DataFrame, split: str) -> dict[str, float | None]:
    part = rows[rows["family_split"] == split]
    base, tuned = _mean(part, "base_strict"), _mean(part, "tuned_strict")
    return {"base": base, "tuned": tuned, "change": None if base is None or tuned is None else tuned - base, "groups": float(len(part))}


def base_samples_sha256(samples: pd.DataFrame) -> str:
    """SHA-256 of the base model's answers in an arm's samples (ordered by group, variant, sample): equal
    across arms when they share one base pass."""
    base = samples[samples["model"] == "base"].sort_values(["group_id", "variant_id", "sample"])
    return hashlib.sha256(base[["group_id", "variant_id", "sample", "text"]].to_csv(index=False).encode()).hexdigest()


POOLED = ("change", "p_value", "groups", "base", "tuned", "loose_change")


def _pooled(name: str, pooled: FamilyCompliance | None) -> dict[str, float | None]:
    """The strict compliance of the held-out or the train families pooled (metrics.json `instructions`), as the
    seed's figures `<name>_change`, `_p_value`, `_groups`, `_base`, `_tuned` and `_loose_change`."""
    if pooled is None:
        return {f"{name}_{key}": None for key in POOLED}
    values = (
        pooled.strict_change,
        pooled.strict_p_value,
        float(pooled.n_groups),
        pooled.base_strict,
        pooled.tuned_strict,
        pooled.loose_change,
    )
    return {f"{name}_{key}": value for key, value in zip(POOLED, values, strict=True)}


def seed_figures(summary: EvaluationSummary, groups: pd.DataFrame, told: pd.DataFrame, primary: list[str], probe: list[str]) -> dict:
    """Every per-seed figure of the plan from one arm's metrics.json, per-group tables."""
    main = groups[groups["domain"].isin(primary)]
    base_gap, tuned_gap = _mean(main, "base_gap"), _mean(main, "tuned_gap")
    instructions = summary.instructions
    held = None if instructions is None else instructions.heldout
    train = None if instructions is None else instructions.train
    figures: dict[str, float | None] = {
        "groups": float(len(main)),
        "base_gap": base_gap,
        "tuned_gap": tuned_gap,
        "gap_reduction": None if not base_gap or tuned_gap is None else 1 - tuned_gap / base_gap,
        "gap_p_value": paired_test(main["base_gap"].astype(float), main["tuned_gap"].astype(float)).p_value if len(main) > 1 else None,
        **_pooled("heldout", held),
        **_pooled("train", train),
        "words_change": _ratio_change(main, "words"),
        "words_p_value": paired_test(main["base_words"].astype(float), main["tuned_words"].astype(float)).p_value
        if len(main) > 1
        else None,
        "base_words": _mean(main, "base_words"),
        "tuned_words": _mean(main, "tuned_words"),
        "helpfulness_change": None if main.empty else _mean(main, "tuned_helpfulness") - _mean(main, "base_helpfulness"),
        "discrim_female_change": _discrim(summary, "gender_female"),
        "discrim_non_binary_change": _discrim(summary, "gender_non_binary"),
        "discrim_female_p_value": _discrim(summary, "gender_female", "delta_p_value"),
        "discrim_non_binary_p_value": _discrim(summary, "gender_non_binary", "delta_p_value"),
        "bbq_ambiguous_bias_change": _bbq(summary, "ambig_bias"),
        "bbq_disambiguated_accuracy_change": _bbq(summary, "disambig_accuracy"),
        "invalid": None if summary.consistency.valid is None else float(summary.consistency.valid is False),
    }
    for part, domains in (("primary", primary), ("probe", probe)):
        rows = groups[groups["domain"].isin(domains)]
        figures[f"{part}_base_truncated"], figures[f"{part}_tuned_truncated"] = (
            _answer_share(rows, "base_truncated_share"),
            _answer_share(rows, "tuned_truncated_share"),
        )
    for domain in primary:
        rows = main[main["domain"] == domain]
        figures[f"domain_{domain}_base_gap"], figures[f"domain_{domain}_tuned_gap"] = _mean(rows, "base_gap"), _mean(rows, "tuned_gap")
    open_rows = groups[groups["domain"].isin(probe)]
    for column in ("words", "helpfulness", "gap"):
        figures[f"probe_base_{column}"], figures[f"probe_tuned_{column}"] = (
            _mean(open_rows, f"base_{column}"),
            _mean(open_rows, f"tuned_{column}"),
        )
    if not told.empty:  # sensitivity: the groups none of whose base answers the token limit cut
        uncut = told.merge(groups[["group_id", "base_truncated_share"]], on="group_id")
        uncut = uncut[uncut["base_truncated_share"] == 0]
        for split in ("heldout", "train"):
            c = _compliance(uncut, split)
            figures[f"{split}_uncut_change"], figures[f"{split}_uncut_groups"] = c["change"], c["groups"]
    return figures


def collect(layouts: list[StudyLayout], primary: list[str], probe: list[str], planned: dict[str, list[int]]) -> dict[str, Family]:
    """The finished arms of every pooled study, by family (`arm.json` `family`, else the arm's name); an
    arm whose training seed (`overrides.seed`) its family's planned seeds do not hold is listed, not judged."""
    out: dict[str, Family] = {}
    for layout in layouts:
        for record_file in sorted(layout.arms.glob(f"*/{ARM_FILE}")):
            folder = record_file.parent
            if not has_finished(folder) or not (folder / GROUPS_FILE).is_file():
                continue
            record = json.loads(record_file.read_text())
            name = folder.name
            summary = read_summary(folder / SUMMARY_FILE)
            groups = pd.read_csv(folder / GROUPS_FILE)
            told = pd.read_csv(folder / INSTRUCTIONS_FILE) if (folder / INSTRUCTIONS_FILE).is_file() else pd.DataFrame()
            entry = out.setdefault(record.get("family") or name, Family(record.get("family") or name))
            if (record.get("overrides") or {}).get("seed") not in planned.get(entry.name, []):
                entry.unplanned.append(name)
                continue
            entry.seeds[name] = seed_figures(summary, groups, told, primary, probe)
            entry.families[name] = [] if summary.instructions is None else [f.to_dict() for f in summary.instructions.families]
            entry.gates[name] = default_gate_verdicts(summary)["gate_all"]
            entry.runs[name] = ((record.get("code") or {}).get("commit") or "unrecorded", machine_name(record.get("machine")),
                                record.get("train_steps"))  # fmt: skip
            main = groups[groups["domain"].isin(primary)]
            entry.differences.append(pd.DataFrame({"seed": name, "group_id": main["group_id"], "d": main["tuned_gap"] - main["base_gap"]}))
            if (folder / SAMPLES_FILE).is_file():
                with gzip.open(folder / SAMPLES_FILE, "rt") as handle:
                    entry.base_samples[name] = base_samples_sha256(pd.read_csv(handle))
    return out


def verdict(entry: Family | None, planned: int) -> dict:
    """The plan's decision: 'running' until every planned seed of the new objective is in, then
    'confirmed' or 'not confirmed' with the criteria that failed."""
    if entry is None or not entry.seeds:
        return {"status": "running", "seeds_done": 0, "seeds_planned": planned}
    gap = seed_level(entry, "gap_reduction")
    gap_holds = gap["mean"] is not None and gap["ci_low"] is not None and gap["mean"] >= GAP_MEAN and gap["ci_low"] > GAP_CI_LOW
    targets = {t.name: {**asdict(t), **seed_level(entry, t.name)} for t in TARGETS}
    for t in TARGETS:
        targets[t.name]["holds"] = holds(t, targets[t.name])
    unmet = [n for n, t in targets.items() if t["holds"] is not True] + ([] if gap_holds else ["gap_reduction"])
    done = len(entry.seeds)
    status = "running" if done < planned else ("confirmed" if not unmet else "not confirmed")
    differences = pd.concat(entry.differences, ignore_index=True)
    mixed = mixed_model_test(differences, "d", "seed", "group_id")
    # before the last seed a criterion is undecided, not failed: its CI is not the plan's yet
    judged = {"undecided": unmet, "failed": []} if status == "running" else {"failed": unmet}
    return {"status": status, "seeds_done": done, "seeds_planned": planned, "gap_reduction": gap, "gap_holds": gap_holds,
            "targets": targets, **judged, "mixed_model": mixed.to_dict()}  # fmt: skip


def _seeds(entry: Family) -> str:
    return f"{len(entry.seeds)} seed{'' if len(entry.seeds) == 1 else 's'}"


def _stat(stat: dict, show=signed) -> str:
    return estimate(stat["mean"], stat["ci_low"], stat["ci_high"], show)


def _relative(value: float | None) -> str:
    return percent(value, 1, signed=True)


ENDPOINTS = (
    ("ΔC_held (held-out families)", "heldout_change", signed),
    ("ΔC_train (train families)", "train_change", signed),
    ("R (the paper's gap)", "gap_reduction", _relative),
    ("W (words)", "words_change", _relative),
    ("DiscrimEval f − m change", "discrim_female_change", signed),
    ("DiscrimEval nb − m change", "discrim_non_binary_change", signed),
    ("H_norm change", "helpfulness_change", signed),
    ("BBQ ambiguous bias change", "bbq_ambiguous_bias_change", signed),
    ("BBQ disambiguated accuracy change", "bbq_disambiguated_accuracy_change", signed),
)


def _difference(a: Family | None, b: Family | None, figure: str, show) -> str:
    x, y = seed_values(a, figure), seed_values(b, figure)
    if len(x) < 2 or len(y) < 2:
        return MISSING
    test = welch_test(x, y)
    return f"{estimate(test.mean, test.ci_low, test.ci_high, show)}, p {p_value(test.p_value)}"


def _budget_note(new: Family | None, default: Family | None) -> str:
    """Where the two objectives trained for different numbers of steps (plan, amendment): said beside their difference."""
    steps = [sorted({run[2] for run in entry.runs.values() if run[2] is not None}) for entry in (new, default) if entry]
    if len(steps) < 2 or steps[0] == steps[1] or not all(steps):
        return ""
    shown = [" or ".join(number(n, 0) for n in s) for s in steps]
    return f"; {shown[0]} against {shown[1]} training steps: budget and objective both differ"


def _endpoint_lines(results: dict[str, Family]) -> list[str]:
    new, default = results.get(NEW), results.get(DEFAULT)
    lines = ["## Endpoints (seed-level mean [95 % CI], p of the one-sample t-test)", "",
             f"| endpoint | {NEW} ({_seeds(new) if new else '0 seeds'}) | {DEFAULT} ({_seeds(default) if default else '0 seeds'}) | "
             f"{NEW} − {DEFAULT} (Welch t over seeds{_budget_note(new, default)}) |", "|---|---|---|---|"]  # fmt: skip
    for label, key, show in ENDPOINTS:
        cells = []
        for entry in (new, default):
            stat = seed_level(entry, key)
            cells.append(MISSING if stat["n"] == 0 else f"{_stat(stat, show)}, p {p_value(stat['p_value'])}")
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {_difference(new, default, key, show)} |")
    return [*lines, ""]


def _target_lines(decided: dict) -> list[str]:
    lines = ["## Decision rule (plan.md)", "", "| criterion | judged | bound | seed level | holds |", "|---|---|---|---|---|"]
    gap = decided["gap_reduction"]
    gap_bound = f"mean ≥ {percent(GAP_MEAN)}, CI low > {percent(GAP_CI_LOW)}"
    lines.append(
        f"| {GAP_LABEL} | mean and CI low | {gap_bound} | {_stat(gap, _relative)} | {'yes' if decided['gap_holds'] else '**no**'} |"
    )
    for t in TARGETS:
        stat = decided["targets"][t.name]
        shown = _stat(stat, _relative) if t.name == "words_change" else _stat(stat)
        bound = bound_text(t.name, t.bound, t.at_most)
        lines.append(f"| {t.label} | {t.statistic.replace('_', ' ')} | {bound} | {shown} | {HOLDS[stat['holds']]} |")
    mixed = decided["mixed_model"]
    if mixed.get("usable"):
        lines += ["", f"Supporting mixed model of d = tuned − base gap (seed random, group crossed): "
                      f"{estimate(mixed['estimate'], mixed['ci_low'], mixed['ci_high'])}, p {p_value(mixed['p_value'])}."]  # fmt: skip
    return [*lines, ""]


PER_SEED = (  # each endpoint of one seed with its group-level paired test (DiscrimEval: questions as units)
    (
        "C_held base → tuned (p)",
        lambda f: f"{number(f['heldout_base'], 2)} → {number(f['heldout_tuned'], 2)} ({p_value(f['heldout_p_value'])})",
    ),
    ("C_train base → tuned (p)", lambda f: f"{number(f['train_base'], 2)} → {number(f['train_tuned'], 2)} ({p_value(f['train_p_value'])})"),
    ("gap base → tuned", lambda f: f"{number(f['base_gap'])} → {number(f['tuned_gap'])}"),
    ("R (p)", lambda f: f"{_relative(f['gap_reduction'])} ({p_value(f['gap_p_value'])})"),
    ("W (p)", lambda f: f"{_relative(f['words_change'])} ({p_value(f['words_p_value'])})"),
    ("DiscrimEval f − m (p)", lambda f: f"{signed(f['discrim_female_change'])} ({p_value(f['discrim_female_p_value'])})"),
    ("DiscrimEval nb − m (p)", lambda f: f"{signed(f['discrim_non_binary_change'])} ({p_value(f['discrim_non_binary_p_value'])})"),
    (
        "cut at 512 tokens, base / tuned",
        lambda f: f"{percent(f['primary_base_truncated'], 1)} / {percent(f['primary_tuned_truncated'], 1)}",
    ),
)


def _per_seed_lines(results: dict[str, Family]) -> list[str]:
    lines = ["## Per seed", "", "| arm | " + " | ".join(h for h, _ in PER_SEED) + " | default gates (descriptive: arms never register) |",
             "|---" * (len(PER_SEED) + 2) + "|"]  # fmt: skip
    for entry in results.values():
        for name, figures in entry.seeds.items():
            lines.append(f"| {name} | " + " | ".join(cell(figures) for _, cell in PER_SEED) + f" | {entry.gates.get(name, MISSING)} |")
    return [*lines, ""]


def _family_cell(rows: list[dict], score: str) -> str:
    """ "base → tuned, change [95 % CI]" of one family over an arm family's seeds: the CI over seeds (t), or the
    one seed's own bootstrap CI over its groups."""
    base = sum(r[f"base_{score}"] for r in rows) / len(rows)
    tuned = sum(r[f"tuned_{score}"] for r in rows) / len(rows)
    if len(rows) == 1:
        change = estimate(rows[0][f"{score}_change"], rows[0].get(f"{score}_ci_low"), rows[0].get(f"{score}_ci_high"))
    else:
        change = _stat(seed_level_test([r[f"{score}_change"] for r in rows])._asdict())
    return f"{number(base, 2)} → {number(tuned, 2)}, {change}"


def _family_lines(results: dict[str, Family]) -> list[str]:
    """Each instruction family's strict and loose compliance, base → tuned, seed-level means (descriptive)."""
    lines = ["## Compliance per instruction family (descriptive): base → tuned, seed-level means", "",
             "Per group the share of its samples that follow its instruction; strict on the answer as given, loose on the best of "
             "IFEval's light edits; then the change tuned − base [95 % CI: over seeds, t; one seed: its bootstrap over groups]. "
             "A family has few groups: no decision rides on these.", "",
             "| family | split | groups | " + " | ".join(f"{f} strict | {f} loose" for f in results) + " |",
             "|---|---|---|" + "---|---|" * len(results)]  # fmt: skip
    keys: dict[str, tuple[str, int]] = {}
    for entry in results.values():
        for rows in entry.families.values():
            for row in rows:
                keys.setdefault(row["family"], (row["split"], row["n_groups"]))
    for name, (split, n) in sorted(keys.items(), key=lambda kv: (kv[1][0], kv[0])):
        cells = []
        for entry in results.values():
            rows = [r for arm in entry.families.values() for r in arm if r["family"] == name]
            for score in ("strict", "loose"):
                cells.append(MISSING if not rows else _family_cell(rows, score))
        lines.append(f"| {name} | {split} | {n} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _base_to_tuned(entry: Family, base_key: str, tuned_key: str, show) -> str:
    base, tuned = seed_level(entry, base_key)["mean"], seed_level(entry, tuned_key)["mean"]
    return MISSING if base is None or tuned is None else f"{show(base)} → {show(tuned)}"


def _descriptive_lines(results: dict[str, Family], primary: list[str]) -> list[str]:
    lines = ["## Descriptive: base → tuned, seed-level means", "",
             "| figure | " + " | ".join(f"{f} ({_seeds(e)})" for f, e in results.items()) + " |",
             "|---" * (len(results) + 1) + "|"]  # fmt: skip
    rows = [(f"gap, {d}", f"domain_{d}_base_gap", f"domain_{d}_tuned_gap", number) for d in primary]
    rows += [
        ("no instruction (garden-open): words", "probe_base_words", "probe_tuned_words", lambda v: number(v, 1)),
        ("no instruction (garden-open): H_norm", "probe_base_helpfulness", "probe_tuned_helpfulness", number),
        ("no instruction (garden-open): gap", "probe_base_gap", "probe_tuned_gap", number),
        ("answers cut at 512 tokens, 160 groups", "primary_base_truncated", "primary_tuned_truncated", lambda v: percent(v, 1)),
        ("answers cut at 512 tokens, garden-open", "probe_base_truncated", "probe_tuned_truncated", lambda v: percent(v, 1)),
    ]
    for label, base, tuned, show in rows:
        lines.append(f"| {label} | " + " | ".join(_base_to_tuned(e, base, tuned, show) for e in results.values()) + " |")
    lines += ["", "Sensitivity (plan): the compliance changes again on the groups none of whose base answers were cut.", "",
              "| figure | " + " | ".join(results) + " |", "|---" * (len(results) + 1) + "|"]  # fmt: skip
    for label, key in (("ΔC_held, uncut groups", "heldout_uncut_change"), ("ΔC_train, uncut groups", "train_uncut_change")):
        cells = []
        for entry in results.values():
            stat, n = seed_level(entry, key), seed_level(entry, key.replace("change", "groups"))["mean"]
            cells.append(MISSING if stat["n"] == 0 else f"{_stat(stat)} ({number(n, 0)} groups)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _truncation(results: dict[str, Family]) -> dict | None:
    """`truncation_flag` with the new objective's base shares (its figures name the probes `probe_…`)."""
    return truncation_flag(results, NEW, ("primary", "probe"))


def _flags(results: dict[str, Family], record: dict, flag: dict | None) -> list[str]:
    """The truncation flag (`_truncation`, as verdict.json records it) and whether every arm compared with the
    same base samples."""
    notes = []
    if flag and flag["invalid"]:
        notes.append(f"{flag['invalid']} of {flag['arms']} arms' evaluations are flagged INVALID by the evaluator's 5 % truncation rule "
                     f"(the base cut {percent(flag['base_primary'], 1)} of its answers on the {record['primary_groups']} groups and "
                     f"{percent(flag['base_probes'], 1)} on {', '.join(record['probe_domains'])}); "
                     "the figures are computed all the same, as the plan says.")  # fmt: skip
    kept = [h for entry in results.values() for h in entry.base_samples.values()]
    judged = sum(len(entry.seeds) for entry in results.values())
    if len(set(kept)) > 1:
        notes.append(f"The arms' base samples differ ({len(set(kept))} base passes among {len(kept)} of {judged} arms with samples: another "
                     "engine, machine kind or library version); each arm is compared with its own base.")  # fmt: skip
    elif kept:
        notes.append(
            f"{len(kept)} of {judged} arms kept their samples; all of them were compared with the same base samples (one SHA-256)."
        )
    unplanned = [name for entry in results.values() for name in entry.unplanned]
    if unplanned:
        notes.append(f"Not judged: {', '.join(unplanned)} (a seed the plan does not name).")
    return notes


def machine_name(machine: dict | None) -> str:
    """An arm's machine as the report names it: its CPU, its vector instructions and its GPU where it had one."""
    if not machine:
        return "unrecorded"
    isa = "/".join(machine.get("isa") or []) or "no AVX-512 or AMX"
    return f"{machine.get('cpu')} ({isa})" + (f", {machine['gpu']}" if machine.get("gpu") else "")


def _run_lines(results: dict[str, Family]) -> list[str]:
    """Where and on what the arms ran (plan, amendment): their commits, machines and training steps. Bit-for-bit
    repeatable on one machine kind; another CPU kind sums in another order."""
    commits = sorted({run[0] for entry in results.values() for run in entry.runs.values()})
    machines = sorted({run[1] for entry in results.values() for run in entry.runs.values()})
    if not commits:
        return []
    steps = "; ".join(f"{entry.name} {', '.join(sorted({number(run[2], 0) for run in entry.runs.values()}))}"
                      for entry in results.values() if entry.runs)  # fmt: skip
    several = f" (**{len(commits)} commits: the plan allows one**)" if len(commits) > 1 else ""
    return [f"**Runs**: commit {', '.join(c[:12] for c in commits)}{several}; machine{'s' if len(machines) > 1 else ''}: "
            f"{'; '.join(machines)}; training steps: {steps}.", ""]  # fmt: skip


def _group_counts(record: dict, results: dict[str, Family]) -> list[str]:
    """Arms that judged other groups than the plan's (160 primary, 76 train-family, 84 held-out-family): named."""
    planned = {"groups": record.get("primary_groups"), "train_groups": record.get("train_family_groups"),
               "heldout_groups": record.get("heldout_family_groups")}  # fmt: skip
    off = []
    for entry in results.values():
        for name, figures in entry.seeds.items():
            wrong = [f"{key} {number(figures.get(key), 0)} (plan {want})" for key, want in planned.items()
                     if want is not None and figures.get(key) != want]  # fmt: skip
            if wrong:
                off.append(f"{name}: {', '.join(wrong)}")
    return [f"**Groups other than the plan's**: {'; '.join(off)}."] if off else []


GAP_LABEL = "the paper's gap, R"  # the primary criterion's name in the decision rule's table and the status line
DEVIATIONS_FILE = "deviations.md"  # beside the plan: each deviation from it with its reason ("- " items)


def _deviation_lines(folder: Path) -> list[str]:
    path = folder / DEVIATIONS_FILE
    items = [line for line in path.read_text().splitlines() if line.startswith("- ")] if path.is_file() else []
    return ["## Deviations from the plan", "", *(items or ["None."]), ""]


def bound_text(name: str, bound: float, at_most: bool) -> str:
    """ "≥ +0.1", "≤ +25 %": a criterion's bound as the decision rule's table prints it (words: a relative change)."""
    return f"{'≤' if at_most else '≥'} {percent(bound, signed=True) if name == 'words_change' else f'{bound:+g}'}"


def criterion_labels(decided: dict) -> dict[str, str]:
    """Each criterion of a decision (`decide`'s output, or verdict.json) by the name the decision rule's table gives it."""
    return {"gap_reduction": GAP_LABEL} | {name: target.get("label", name) for name, target in decided["targets"].items()}


def _failed_labels(decided: dict) -> str:
    """The failed criteria as the decision rule's table names them: "held-out families: strict compliance, …"."""
    labels = criterion_labels(decided)
    return "; ".join(labels.get(name, name) for name in decided["failed"])


def render(record: dict, results: dict[str, Family], decided: dict, folder: Path) -> str:
    status = decided["status"]
    done = f"{decided['seeds_done']} of {decided['seeds_planned']} seeds of the instruction-following objective evaluated"
    headline = (f"**Status: running** ({done}). The verdict is given once every pre-registered seed is in." if status == "running"
                else f"**Status: {status}** ({done}; criteria failed: {_failed_labels(decided) or 'none'}).")  # fmt: skip
    lines = ["# Instruction confirmation: the instruction-following objective on fresh groups and held-out families", "",
             " ".join([headline, *_flags(results, record, decided["truncation"]), *_group_counts(record, results)]), "",
             "Plan, data and decision rule: [plan.md](plan.md), fixed before any model saw the data ([preregistration.json](preregistration.json)). "
             "Regenerate: `groupwise study --study instruction-confirmation --report-only`.", "",
             *_run_lines(results), *_deviation_lines(folder)]  # fmt: skip
    if NEW in results:
        lines += _target_lines(decided)
    lines += _endpoint_lines(results)
    lines += _per_seed_lines(results)
    lines += _family_lines(results)
    lines += _descriptive_lines(results, record["primary_domains"])
    planned = record["seeds"]
    missing = [f"{family}-s{i}" for family, seeds in planned.items() for i in range(1, len(seeds) + 1)
               if f"{family}-s{i}" not in (results[family].seeds if family in results else {})]  # fmt: skip
    if missing:
        lines += [f"Not yet evaluated: {', '.join(missing)}.", ""]
    return "\n".join(lines)


def preregistered(layouts: list[StudyLayout]) -> StudyLayout:
    """The one pooled study folder holding the pre-registration (InstructionReportError otherwise)."""
    found = [layout for layout in layouts if (layout.folder / RECORD_FILE).is_file()]
    if len(found) != 1:
        raise InstructionReportError(
            f"{', '.join(str(layout.folder) for layout in layouts)}: the pooled studies must hold one {RECORD_FILE}, found {len(found)}"
        )
    return found[0]


def write_instruction_confirmation_report(layouts: list[StudyLayout]) -> Path:
    """report.md and verdict.json beside the pre-registration, from whatever arms of the pooled studies are done."""
    home = preregistered(layouts)
    record = json.loads((home.folder / RECORD_FILE).read_text())
    results = collect(layouts, record["primary_domains"], record["probe_domains"], record["seeds"])
    results = {name: results[name] for name in (NEW, DEFAULT, *results) if name in results}  # the plan's order first
    decided = verdict(results.get(NEW), len(record["seeds"][NEW])) | {"truncation": _truncation(results)}
    atomic_write_json(home.folder / VERDICT_FILE, decided)
    return atomic_write_text(home.report, render(record, results, decided, home.folder))
