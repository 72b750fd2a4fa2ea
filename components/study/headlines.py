"""The README's results (and docs/results.md's): one line per study, computed from that study's committed
files under results/.

`HEADLINES` maps a name to a function of the repository root that reads the study's artifacts
(table.csv, the arms' metrics.json and arm.json, a registration's decision.json, a benchmark's log)
and returns a `Headline`: its status, one or two figures with their q, and a link to its report.
Status: **exploratory**, a result of the recipe search (its data were looked at more than once);
**confirmed** or **not confirmed**, a pre-registered test's verdict (results/confirmation/verdict.json,
written by `components.study.confirmation_report`), "pre-registered, running" until every seed is in.

    python -m components.study.headlines --write    # rewrite the generated blocks of README.md and docs/results.md
    python -m components.study.headlines --check    # exit 1 when they differ from results/

Each of `GENERATED_FILES` holds some of the `BLOCKS` (`components.study.readme_blocks`): `results` (these
lines, their links relative to that file), `make-run` (`components.study.reference_run`), `speed` (the
speed table per CPU kind, `components.study.speed_table`) and `gpu` (the GPU checks' figures,
`components.study.gpu_table`); tests/unit/test_readme_results.py fails when one
differs from what the committed files give.
Numbers are written by `components.formatting`, as in every report.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from components.formatting import estimate, is_missing, number, p_value, percent, signed, span, typographic
from components.study.confirmation_report import committed_truncation_flag
from components.study.gpu_table import gpu_table_lines
from components.study.instruction_confirmation_report import bound_text, criterion_labels
from components.study.layout import has_finished
from components.study.readme_blocks import markers, stale_blocks, write_blocks
from components.study.reference_run import log_groups, reference_run_lines
from components.study.speed_table import speed_table_lines

RESULTS = Path("results")
EXPLORATORY = "exploratory"


class Headline(NamedTuple):
    """One study's line: its status label, the sentence, and the file it links to (relative to the root)."""

    label: str
    text: str
    link: str
    link_text: str = "report"

    def line(self, links_from: str = "") -> str:
        """The markdown line; `links_from`: the path from the file that shows it to the root ("../" in docs/)."""
        return f"- **{self.label}** · {self.text} ([{self.link_text}]({links_from}{self.link}))"


def _change(value: float) -> str:
    """A relative change as a signed percentage: −56%, +180%."""
    return typographic(percent(value, signed=True))


def _changes(values) -> str:
    """Several relative changes, one per seed: −53% / −42% / −54%."""
    return " / ".join(_change(v) for v in values)


def _overall(study: Path, family: str) -> pd.DataFrame:
    """The overall rows of a consistency-type study's table.csv for one arm family, in arm order."""
    table = pd.read_csv(study / "table.csv")
    return table[(table["scope"] == "overall") & (table["family"] == family)].sort_values("arm")


def _gates(verdicts: list[str]) -> str:
    """The default gates' verdict over the rows (`gate_all` of the study table) in words."""
    refused = sorted({g for v in verdicts if v.startswith("refused") for g in v.split(":", 1)[1].split("(n/a")[0].strip().split(", ")})
    if not refused:
        return "every default gate passed" + (" in each seed" if len(verdicts) > 1 else "")
    return "refused by " + ", ".join(f"`{g}`" for g in refused)


# ---- the consistency studies -------------------------------------------------------------------------------


def consistency(root: Path) -> Headline:
    """The paper's reward, the consistency study's main arm `grpo`: its gap, its length, its gates."""
    r = _overall(root / RESULTS / "consistency", "grpo").iloc[0]
    text = (
        f"consistency, the paper's reward (`{r['arm']}`, {int(r['n_groups'])} held-out groups): gap {number(r['base_gap'])} → "
        f"{number(r['tuned_gap'])} ({_change(-r['relative_reduction'])}, q {p_value(r['q_value'])}), answers "
        f"{_change(r['tuned_words'] / r['base_words'] - 1)} long: {_gates([r['gate_all']])}"
    )
    return Headline(EXPLORATORY, text, "results/consistency/report.md")


PARITY_ARM = "pairing-term-w0.25-heldout"  # the default objective's recipe, held out


def _female_scores(arm_dir: Path) -> tuple[float, float]:
    score = json.loads((arm_dir / "metrics.json").read_text())["fairness"]["discrim_eval"]["scores"]["gender_female"]
    return score["base_score"], score["tuned_score"]


def compliance_parity(root: Path) -> Headline:
    """The default objective's recipe on the held-out groups, every seed: gap change, DiscrimEval, gates."""
    study = root / RESULTS / "compliance-parity"
    rows = _overall(study, PARITY_ARM)
    scores = [_female_scores(study / "arms" / arm) for arm in rows["arm"]]
    text = (
        f"compliance-parity, the default objective (`{PARITY_ARM}`, {len(rows)} seeds): gap "
        f"{_changes(-rows['relative_reduction'])} (q ≤ {p_value(rows['q_value'].max())}), DiscrimEval female − male "
        f"{typographic(signed(scores[0][0]))} → {' / '.join(typographic(signed(t)) for _, t in scores)}; {_gates(list(rows['gate_all']))}"
    )
    return Headline(EXPLORATORY, text, "results/compliance-parity/report.md")


# ---- the pre-registered confirmation -------------------------------------------------------------------------


def confirmation(root: Path) -> Headline:
    """The pre-registered confirmation: "running (k of n seeds)" until verdict.json says confirmed or not."""
    folder = root / RESULTS / "confirmation"
    record = json.loads((folder / "preregistration.json").read_text())
    verdict_file = folder / "verdict.json"
    verdict = json.loads(verdict_file.read_text()) if verdict_file.is_file() else {"status": "running", "seeds_done": 0}
    planned = verdict.get("seeds_planned") or len(next(iter(record["seeds"].values())))  # the recipe's seeds come first
    where = f"{record['primary_groups']} new groups in {len(record['primary_domains'])} new domains"
    if verdict["status"] == "running":
        label = f"pre-registered, running ({verdict['seeds_done']} of {planned} seeds)"
        text = f"confirmation of the default objective: its gap reduction and secondary targets on {where}, {planned} training seeds"
        return Headline(label, text, "results/confirmation/plan.md", "plan")
    primary = verdict["primary"]
    failed = verdict.get("failed") or []
    text = (
        f"confirmation of the default objective on {where}: gap reduction {percent(primary['mean'])} "
        f"[{percent(primary['ci_low'])}, {percent(primary['ci_high'])}] over {primary['n']} seeds, p {p_value(primary['p_value'])}"
        + (f"; failed: {', '.join(failed)}" if failed else _targets_held(verdict.get("targets") or {}))
    )
    text += _truncation(committed_truncation_flag(folder))
    return Headline(verdict["status"], text, "results/confirmation/report.md")


def _truncation(flag: dict | None) -> str:
    """ "; all 8 arms INVALID by the 5 % truncation rule (base cut 2.6 %, probes 24.7 %)" ("" when none is)."""
    if not flag or not flag["invalid"]:
        return ""
    arms = "all" if flag["invalid"] == flag["arms"] else f"{flag['invalid']} of"
    return (f"; {arms} {flag['arms']} arms INVALID by the 5 % truncation rule (base cut "
            f"{percent(flag['base_primary'], 1)}, probes {percent(flag['base_probes'], 1)})")  # fmt: skip


def _targets_held(targets: dict) -> str:
    """ "; every secondary target held (compliance …, words …, DiscrimEval female − male …)", seed-level means."""
    try:
        shown = [
            f"compliance {signed(targets['compliance_change']['mean'], 2)}",
            f"words {typographic(percent(targets['words_change']['mean'], signed=True))}",
            f"DiscrimEval female − male {typographic(signed(targets['discrim_female_change']['mean']))} logit",
        ]
    except KeyError:
        return "; every secondary target held"
    return f"; every secondary target held ({', '.join(shown)})"


def instruction_following(root: Path) -> Headline:
    """The instruction-following objective (IFEval's families as a reward): each calibration arm's change of strict
    compliance with the train families and the rule's verdict (`instruction_calibration_report.judge`), and so
    whether the pre-registered instruction confirmation runs."""
    from components.contracts.summary import read_summary
    from components.study.instruction_calibration_report import judge

    folder = root / RESULTS / "instruction-calibration"
    cells, passing = [], []
    for record_file in sorted((folder / "arms").glob("*/arm.json")):
        record = json.loads(record_file.read_text())
        judged = judge(read_summary(record_file.parent / "metrics.json"))
        weight = record["overrides"]["reward"]["weights"]["instruction_following"]
        steps = record["overrides"].get("train", {}).get("steps")  # an arm's own budget, where it has one
        change = judged["criteria"]["train_compliance_change"]["value"]
        cells.append(f"{typographic(signed(change))} at weight {weight:g}" + (f" over {steps} steps" if steps else ""))
        if judged["passes"]:
            passing.append(record["name"])
    what = f"instruction following (IFEval's train families, train groups, {len(cells)} settings, 1 seed each): strict compliance {', '.join(cells)} (+0.10 needed)"
    if passing:
        decided = instruction_confirmation(root)
        if decided is not None:
            return decided
        running = _instruction_confirmation_progress(root)
        text = (f"instruction following, calibration (train groups, 1 seed each): train-family strict compliance {', '.join(cells)} "
                f"(+0.10 needed); {', '.join(passing)} passed: {running}" if running else
                f"{what}; {', '.join(passing)} passed the calibration's rule: the recipe the pre-registered confirmation tests")  # fmt: skip
    else:
        text = f"{what}; no setting passed the calibration's rule, so the pre-registered instruction confirmation was not run and the default objective stays"
    return Headline(EXPLORATORY, text, "results/instruction-calibration/report.md")


def _finished_arms(folder: Path) -> int:
    return sum(1 for arm in (folder / "arms").glob("*") if has_finished(arm))


def _instruction_confirmation_progress(root: Path) -> str:
    """ "its pre-registered confirmation is running (k of 5 seeds, d of 3 of the default's)" ("" before its files)."""
    folder = root / RESULTS / "instruction-confirmation"
    if not (folder / "preregistration.json").is_file():
        return ""
    seeds = json.loads((folder / "preregistration.json").read_text())["seeds"]
    new, default = (len(seeds[name]) for name in ("instruction-following", "default"))
    done = _finished_arms(folder), _finished_arms(root / RESULTS / "instruction-confirmation-default")
    return f"its pre-registered confirmation is running ({done[0]} of {new} seeds, {done[1]} of {default} of the default's)"


def instruction_confirmation(root: Path) -> Headline | None:
    """The pre-registered instruction confirmation's verdict (verdict.json), once given: the decision rule's figures,
    seed-level means [95 % CI], each marked where its criterion failed; None while it runs."""
    folder = root / RESULTS / "instruction-confirmation"
    verdict_file = folder / "verdict.json"
    verdict = json.loads(verdict_file.read_text()) if verdict_file.is_file() else {"status": "running"}
    if verdict["status"] == "running":
        return None
    targets, gap = verdict["targets"], verdict["gap_reduction"]
    held, train, words = targets["heldout_change"], targets["train_change"], targets["words_change"]
    failed = set(verdict.get("failed") or [])
    groups = json.loads((folder / "preregistration.json").read_text())["primary_groups"]
    shown = {
        "heldout_change": f"held-out-family compliance {typographic(estimate(held['mean'], held['ci_low'], held['ci_high']))}",
        "train_change": f"train families {typographic(signed(train['mean']))}",
        "gap_reduction": f"gap reduction {typographic(estimate(gap['mean'], gap['ci_low'], gap['ci_high'], percent))}",
        "words_change": f"words {_change(words['mean'])}",
    }
    figures = [figure + (_failed(name, targets.get(name, {})) if name in failed else "") for name, figure in shown.items()]
    labels = criterion_labels(verdict)
    others = [labels.get(name, name) for name in sorted(failed - shown.keys())]
    text = (
        f"instruction-following reward, {groups} new groups, {verdict['seeds_done']} seeds: {', '.join(figures)}"
        + (f"; failed: {', '.join(others)}" if others else "")
        + ("" if failed else "; every criterion held")
        + _truncation(verdict.get("truncation"))
        + ("; the default stays" if verdict["status"] == "not confirmed" else "")
    )  # fmt: skip
    return Headline(verdict["status"], text, "results/instruction-confirmation/report.md")


def _failed(name: str, target: dict) -> str:
    """ " (failed: CI low ≥ −0.02)", " (failed: ≥ +0.1)": a failed criterion and the bound its statistic had to meet,
    as the report's decision rule prints it."""
    if "bound" not in target:
        return " (failed)"
    statistic = {"ci_low": "CI low ", "ci_high": "CI high "}.get(target.get("statistic", ""), "")
    return f" (failed: {statistic}{typographic(bound_text(name, target['bound'], target.get('at_most', False)))})"


# ---- GAPO and SEED-GRPO (diversity_report tables) ---------------------------------------------------------


def _comparison(study: Path, comparison: str, arm: str, family: str, metric: str) -> pd.Series:
    """The table.csv row of one comparison ("head to head" or "vs base") of `arm` on a task family's metric."""
    table = pd.read_csv(study / "table.csv")
    pick = (table["comparison"] == comparison) & (table["arm"] == arm) & (table["family"] == family) & (table["metric"] == metric)
    return table[pick].iloc[0]


def _head_to_head(study: Path, arm: str, family: str, metric: str) -> pd.Series:
    return _comparison(study, "head to head", arm, family, metric)


def _points(share: float | None) -> str:
    """A difference of two shares in percentage points: ``+6.9``."""
    return signed(None if is_missing(share) else 100 * share, 1)


def _over_seeds(row: pd.Series, show: Callable[[float | None], str] = signed, unit: str = "") -> str:
    """The comparison's seed-level inference, the study's primary one (each seed's difference a unit):
    "d [low, high] over n seeds, q"; task-level p-values treat one seed's tasks as independent evidence,
    and the headline shows none."""
    if "seed_q_value" not in row or pd.isna(row["seed_q_value"]):
        return "no seed-level inference recorded"
    shown = estimate(row["seed_diff"], row["seed_ci_low"], row["seed_ci_high"], show)
    return typographic(f"{shown}{unit} over {int(row['n_seeds'])} seeds, q {p_value(row['seed_q_value'])}")


def _vs_base(study: Path, arm: str, family: str, metric: str) -> pd.Series:
    return _comparison(study, "vs base", arm, family, metric)


def gapo(root: Path) -> Headline:
    """GAPO against GRPO on the held-out list tasks: coverage of the valid set and every option named, with
    seed-level inference."""
    study = root / RESULTS / "gapo"
    coverage, every = (_head_to_head(study, "gapo", "list", m) for m in ("coverage", "all_valid"))
    text = (
        f"GAPO vs GRPO ({int(coverage['n_tasks'])} held-out list tasks, {int(coverage['seeds'])} seeds): coverage "
        f"{number(coverage['reference'], 2)} → {number(coverage['value'], 2)} ({_over_seeds(coverage, lambda v: signed(v, 2))}), "
        f"every option named {percent(every['reference'], 1)} → {percent(every['value'], 1)} of tasks "
        f"({_over_seeds(every, _points, ' points')})"
    )
    return Headline(EXPLORATORY, text, "results/gapo/report.md")


def seed(root: Path) -> Headline:
    """SEED-GRPO against GRPO on the held-out arithmetic tasks: accuracy, with seed-level inference."""
    study = root / RESULTS / "seed"
    r = _head_to_head(study, "seed-grpo", "arith", "validity")
    base = _vs_base(study, "grpo-correctness", "arith", "validity")
    text = (
        f"SEED-GRPO vs GRPO ({int(r['n_tasks'])} held-out arithmetic tasks, {int(r['seeds'])} seeds): accuracy {number(base['reference'], 2)} "
        f"→ {number(r['reference'], 2)} with GRPO, {number(r['value'], 2)} with SEED-GRPO (d {_over_seeds(r)})"
    )
    return Headline(EXPLORATORY, text, "results/seed/report.md")


# ---- the fairness study ----------------------------------------------------------------------------------------

PARITY_RECIPE = "decision-parity-60steps-beta0.4"  # the recipe that met the study's target
PLANT, PLANT_REMOVAL = "planted-bias-sized", "planted-sized-to-parity"
REGISTRATION = "registration-60steps"  # that recipe through `groupwise retrain --profile fairness`


def _fairness_table(root: Path) -> pd.DataFrame:
    return pd.read_csv(root / RESULTS / "fairness" / "table.csv")


def _versus_male(demographic: str) -> str:
    """'gender_non_binary' -> 'non-binary − male' (DiscrimEval scores are against male)."""
    return demographic.split("_", 1)[1].replace("_", "-") + " − male"


def fairness(root: Path) -> Headline:
    """GRPO decision parity, the recipe that met the target: per-seed reduction of each held-out disparity."""
    table = _fairness_table(root)
    rows = table[table["family"] == PARITY_RECIPE].sort_values("arm")
    arm = json.loads((root / RESULTS / "fairness" / "arms" / rows["arm"].iloc[0] / "arm.json").read_text())
    cuts = [f"{_versus_male(key)} {_changes(-part['reduction'])}" for key, part in rows.groupby("demographic", sort=True)]
    text = (
        f"fairness, GRPO decision parity ({arm['train_steps']} steps, β {arm['overrides']['train']['beta']:g}, "
        f"{rows['arm'].nunique()} seeds, {int(rows['n_questions'].iloc[0])} held-out DiscrimEval questions): "
        f"{', '.join(cuts)} (q ≤ {p_value(rows['change_q'].max())})"
    )
    return Headline(EXPLORATORY, text, "results/fairness/report.md")


def fairness_planted(root: Path) -> Headline:
    """A planted bias of known size and its removal: how much is removed, and what the removal leaves."""
    table = _fairness_table(root)
    planted = table[table["planted"].astype(bool)]
    plant = planted[planted["family"] == PLANT]
    removed = planted[planted["family"] == PLANT_REMOVAL].sort_values("arm")
    residual = removed["tuned_score"].abs() / removed["base_score"].abs()
    flipped = bool(((removed["tuned_score"] * removed["base_score"]) < 0).all())
    text = (
        f"fairness, a planted {_versus_male(removed['demographic'].iloc[0])} bias "
        f"({span(plant['tuned_score'].abs() / plant['base_score'].abs(), lambda v: number(v, 0))}× the base's) was removed "
        f"{' / '.join(percent(v) for v in removed['removal'])} (q ≤ {p_value(removed['removal_q'].max())}), "
        f"leaving {span(residual, lambda v: number(v, 1))}× the base's disparity"
        + (" with the opposite sign" if flipped else "")
        + f", profile ρ {span(removed['profile_correlation'], lambda v: number(v, 2))}"
    )
    return Headline(EXPLORATORY, text, "results/fairness/report.md")


def fairness_registration(root: Path) -> Headline:
    """The target-meeting recipe through the registry: the gates that refused it, judged again by today's."""
    from components.config import load_params
    from components.release.gate import evaluate_gates

    folder = root / RESULTS / "fairness" / REGISTRATION
    then = json.loads((folder / "decision.json").read_text())
    refused = sorted((g for g in then["gates"] if not g["passed"]), key=lambda g: g["name"])
    today = {
        r.name: r
        for r in evaluate_gates(
            json.loads((folder / "metrics.json").read_text()), load_params(root / "params.yaml", "fairness").gate
        ).results
    }
    reasons = ", ".join(f"{g['name']} {number(g['value'], 2)} > {number(g['threshold'], 2)}" for g in refused)
    text = f"fairness, that recipe via `groupwise retrain --profile fairness` (one run): refused on {reasons}"
    if any(today[g["name"]].threshold != g["threshold"] for g in refused):
        still = [r.name for r in today.values() if not r.passed]
        thresholds = ", ".join(f"{number(today[g['name']].threshold, 2)}" for g in refused)
        verdict = f"refuse it on {', '.join(still)}" if still else "pass it"
        text += f"; the fairness profile's gates in params.yaml ({thresholds}) {verdict}"
    return Headline(EXPLORATORY, text, f"results/fairness/{REGISTRATION}/gates.md", "gates")


# ---- benchmarks --------------------------------------------------------------------------------------------------


def discrim_eval_base(root: Path) -> Headline:
    """The embedded model's DiscrimEval scores over all questions (results/base-model/discrim_eval_base.json)."""
    record = json.loads((root / RESULTS / "base-model" / "discrim_eval_base.json").read_text())["all"]
    female, non_binary = record["scores"]["gender_female"], record["scores"]["gender_non_binary"]
    text = (
        f"DiscrimEval, the base model ({record['n_questions']} questions, {record['n_prompts']:,} prompts): female − male "
        f"{typographic(signed(female['score']))} [{typographic(signed(female['ci_low']))}, {typographic(signed(female['ci_high']))}] logit (p {p_value(female['p_value'])}), "
        f"non-binary − male {typographic(signed(non_binary['score']))} [{typographic(signed(non_binary['ci_low']))}, {typographic(signed(non_binary['ci_high']))}]"
    )
    return Headline(EXPLORATORY, text, "results/base-model/discrim_eval_base.json", "artifact")


SPEED_LOG = "eval_first_calls.txt"


def _find(pattern: str, text: str) -> tuple[str, ...]:
    return log_groups(SPEED_LOG, pattern, text)


def speed(root: Path) -> Headline:
    """Evaluation speed from the committed log of benchmarks/eval_throughput.py --first-calls: the engine against
    raw vLLM (first call against first call, fresh engines; and best of the alternating calls) and against the
    transformers engine."""
    log = (root / RESULTS / "speed" / SPEED_LOG).read_text()
    (machine,) = _find(r"^# [\d-]+, ([^,;]+)", log.splitlines()[1])
    sequences, tokens, dtype = _find(r"= (\d+) sequences, <= (\d+) new tokens, (\w+)", log)
    (first_calls,) = _find(r"first calls, fresh engines .*: groupwise / raw tok/s ([\d.]+)", log)
    best_of, ratio = _find(r"best of (\d+) alternating runs each: ([\d.]+)", log)
    (vs_transformers,) = _find(r"vLLM / transformers engine tokens/s \(base model\): ([\d.]+)x", log)
    (with_start,) = _find(r"vLLM incl\. its start-up: [\d.]+ tok/s = ([\d.]+)x", log)
    text = (
        f"speed, evaluation ({sequences} sequences ≤ {tokens} tokens, {dtype}, {machine}): vLLM engine {first_calls}× raw vLLM "
        f"on fresh engines' first calls ({ratio}× best of {best_of}), {vs_transformers}× the transformers engine "
        f"({with_start}× with the engine start)"
    )
    return Headline(EXPLORATORY, text, f"results/speed/{SPEED_LOG}", "log")


HEADLINES: dict[str, Callable[[Path], Headline]] = {
    "consistency": consistency,
    "compliance-parity": compliance_parity,
    "confirmation": confirmation,
    "instruction-following": instruction_following,
    "gapo": gapo,
    "seed": seed,
    "fairness": fairness,
    "fairness-registration": fairness_registration,
    "fairness-planted": fairness_planted,
    "discrim-eval-base": discrim_eval_base,
    "speed": speed,
}


def results_lines(root: Path, links_from: str = "") -> list[str]:
    """The results block: one line per entry of `HEADLINES`, in its order."""
    return [headline(Path(root)).line(links_from) for headline in HEADLINES.values()]


BLOCKS: dict[str, Callable[[Path, str], list[str]]] = {  # block name -> its lines from the root, links relative to the file
    "results": results_lines,
    "make-run": reference_run_lines,
    "speed": speed_table_lines,
    "gpu": gpu_table_lines,
}
# file (from the root) -> (path back to the root, the blocks it carries); a file is generated where it carries its first block
GENERATED_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "README.md": ("", ("results", "make-run", "speed")),
    "docs/results.md": ("../", ("results", "make-run")),
    "docs/benchmarks.md": ("../", ("speed", "gpu")),
}


def readme_blocks(root: Path, name: str = "README.md") -> dict[str, list[str]]:
    """Every generated block of `name`, one of `GENERATED_FILES`, by marker name."""
    links_from, blocks = GENERATED_FILES[name]
    return {block: BLOCKS[block](Path(root), links_from) for block in blocks}


def generated_blocks(root: Path) -> dict[Path, dict[str, list[str]]]:
    """The blocks of each of `GENERATED_FILES` under `root` that carries them (a project's own README does not)."""
    root = Path(root)
    carrying = [
        name
        for name, (_, blocks) in GENERATED_FILES.items()
        if (root / name).is_file() and markers(blocks[0])[0] in (root / name).read_text()
    ]
    return {root / name: readme_blocks(root, name) for name in carrying}


def write_generated(root: Path) -> dict[Path, list[str]]:
    """Rewrite every generated file's blocks in place; the names of the blocks that changed, by file."""
    return {path: write_blocks(path, blocks) for path, blocks in generated_blocks(root).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The results lines of README.md and docs/results.md, from results/ (module docstring).")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the generated blocks in place")
    action.add_argument("--check", action="store_true", help="exit 1 when a generated block differs from results/")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root holding results/")
    args = parser.parse_args(argv)
    files = generated_blocks(args.root)
    if args.write:
        for path, changed in write_generated(args.root).items():
            print(f"{path}: {'rewrote ' + ', '.join(changed) if changed else 'up to date'}")
        return 0
    if args.check:
        stale = {path: stale_blocks(path, blocks) for path, blocks in files.items()}
        for path, names in stale.items():
            print(f"{path}: " + (f"stale: {', '.join(names)} (run with --write)" if names else "up to date"))
        return 1 if any(stale.values()) else 0
    print("\n\n".join("\n".join(lines) for lines in readme_blocks(args.root).values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
