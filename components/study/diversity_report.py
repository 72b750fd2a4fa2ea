"""The GAPO and SEED-GRPO studies' results: per task family, paired against the base and between arms.

Every arm of a `report: diversity` study leaves `results/NAME/arms/<arm>/` holding its evaluation's
`per_group_diversity.csv` (one row per held-out task: `base_<m>` and `tuned_<m>`, K samples each)
and `arm.json`. A task's family is its domain up to the first '-' (the generated tasks of
`components.data.task_generators`: `list`, `count`, `arith`). Per arm, family and metric:

    d̄ = mean over tasks of (tuned − base), a paired percentile bootstrap CI, the paired t-test's p,
    and q = Benjamini–Hochberg over every test of the report (base comparisons and head-to-head).

Head-to-head rows (`study.compare: [[A, B]]`) pair arm A's tuned value with arm B's on the same
task: both evaluations draw the base with the same seed on the same prompts, so the tasks align.

Seeds: an arm with `seeds` runs as arms `<arm>-s1`, `<arm>-s2`, ... (`family` `<arm>`), all on the
same held-out tasks (checked: a ValueError names the seeds whose tasks differ). It is reported as one
arm, its value of a metric on task t the mean over its S finished seeds, base and tuned alike,

    x̄_t = (1/S) Σ_s x_{s,t},

and every test above runs over tasks on the x̄_t; `detectable` is the paired difference that n tasks
detect at α = 0.01 with 80 % power given sd_t(d̄_t) of the seed-averaged differences (`detectable_effect`).
Seed-to-seed spread: the per-seed means m_s = mean_t x_{s,t} of the tuned value, their min, max and sd.
A head-to-head's design is "powered" when that detectable difference of the family's first metric is
≤ 0.15. An unseeded arm is one seed, unchanged; while no seeded arm has finished, a seeded arm's
earlier unseeded run (`arms/<arm>/`) is reported in its place.

Seed-level inference, the primary one (`components.evaluation.seed_inference`): the seeds, not the tasks,
replicate a training method. Per comparison, family and metric, the paired differences d_{s,t} (tuned −
base of seed s, or arm A's seed s − arm B's seed s, the same seed index `<arm>-s<i>`, which draws the same
base samples), their per-seed means d_s = mean_t d_{s,t}, and

    d̄ = mean_s d_s, its t-interval and one-sample t-test p over the n seeds (df = n − 1),
    q_seed = Benjamini–Hochberg over the seed-level tests of the report,
    μ̂ of d_{s,t} = μ + u_s + v_t + ε_{s,t} (seed and task random, REML), its CI and p on t with n − 1 df,

the mixed model reported only where it converges with σ̂²_seed > 0. The task-level rows above treat the
tasks as independent and ignore seed variation; `changed_conclusions` names the rows whose verdict
(q < α) differs between the two.

Metrics (GAPO, arXiv:2511.12596; SEED-GRPO, arXiv:2505.12346): `all_valid`, the share of tasks whose
K samples name every valid option; `coverage`, the share of the valid set named; `validity`, the
share of valid samples, which on the one-answer arithmetic tasks is the accuracy; `js_to_uniform`.
Nothing here runs a model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from components.contracts.atomic import atomic_write_text
from components.data.selection import in_domains
from components.evaluation.seed_inference import mixed_model_test, seed_level_test
from components.evaluation.statistics import benjamini_hochberg, bootstrap_ci, detectable_effect, paired_test
from components.formatting import interval, number, p_value, percent, signed
from components.machine import machine_label
from components.reporting.metric_labels import label
from components.study.layout import ARM_FILE, StudyLayout
from components.study.report import arm_family

TASKS_FILE = "per_group_diversity.csv"
FAMILY_LABELS = {"list": "list selection", "count": "constrained counting", "arith": "arithmetic"}
# metrics per family: arithmetic has one right answer, so validity is accuracy and coverage pass@K
FAMILY_METRICS = {
    "arith": ("validity", "coverage"),
    "*": ("all_valid", "coverage", "validity", "js_to_uniform"),
}
# arithmetic's own names; every other label is the report page's (components.reporting.metric_labels)
ARITHMETIC_LABELS = {
    "validity": "accuracy (share of samples right)",
    "coverage": "pass@K (a task answered right at least once)",
}
COLUMNS = ["comparison", "arm", "against", "family", "metric", "n_tasks", "reference", "value", "diff",
           "ci_low", "ci_high", "p_value", "detectable", "q_value",
           "seeds", "against_seeds", "seed_min", "seed_max", "seed_sd",
           "n_seeds", "seed_diffs", "seed_diff", "seed_ci_low", "seed_ci_high", "seed_p_value", "seed_q_value",
           "mixed_diff", "mixed_ci_low", "mixed_ci_high", "mixed_p_value", "mixed_p_wald", "mixed_seed_sd",
           "mixed_task_sd", "mixed_note"]  # fmt: skip
ALPHA, POWER = 0.01, 0.8  # of the detectable difference
POWERED_AT = 0.15  # a head-to-head design is powered when its detectable difference is at most this
BOOTSTRAP = {"n_resamples": 2000, "confidence": 0.95, "seed": 0}


def family(domain: str) -> str:
    """`list-colour-003` -> `list`; a hand-written domain without '-' is its own family."""
    return str(domain).split("-", 1)[0]


def family_order(fam: str) -> tuple[int, str]:
    """The generated families in the order of the papers' claims (list, count, arithmetic), then the rest."""
    order = list(FAMILY_LABELS)
    return (order.index(fam) if fam in order else len(order), fam)


def metrics_of(fam: str) -> tuple[str, ...]:
    return FAMILY_METRICS.get(fam, FAMILY_METRICS["*"])


def metric_label(fam: str, metric: str) -> str:
    if fam == "arith" and metric in ARITHMETIC_LABELS:
        return ARITHMETIC_LABELS[metric]
    return label("diversity", metric).label


def load_arms(arms_dir: Path, order: list[str]) -> dict[str, pd.DataFrame]:
    """{arm: its per-task table (with a `family` column)} for every finished arm, in `order`."""
    found = {}
    for name in order:
        folder = Path(arms_dir) / name
        if (folder / ARM_FILE).is_file() and (folder / TASKS_FILE).is_file():
            frame = pd.read_csv(folder / TASKS_FILE)
            found[name] = frame.assign(family=frame["domain"].map(family))
    return found


def finished_arms(arms_dir: Path, arms: dict[str, dict]) -> tuple[dict[str, pd.DataFrame], dict[str, str], list[str]]:
    """(per-task table of each finished arm, each one's arm family, the earlier unseeded runs used).

    While no seed arm of the study has finished, a seeded arm's earlier unseeded run (`arms/<arm>/`,
    from before it had seeds) stands in for it, so the report keeps showing what was run."""
    families = {name: arm_family(name, arm) for name, arm in arms.items()}
    found = load_arms(arms_dir, list(arms))
    seeded = list(dict.fromkeys(fam for name, fam in families.items() if fam != name))
    earlier: list[str] = []
    if seeded and not any(families[name] != name for name in found):
        earlier = [fam for fam in seeded if fam not in arms]
        found.update(load_arms(arms_dir, earlier))
        earlier = [fam for fam in earlier if fam in found]
        families.update({fam: fam for fam in earlier})
    return found, {name: families[name] for name in found}, earlier


def _seed_mean(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Per task (the first frame's order), the mean over the frames of every numeric base_/tuned_ column."""
    if len(frames) == 1:
        return frames[0]
    columns = [c for c in frames[0].columns
               if c.startswith(("base_", "tuned_")) and all(c in f and pd.api.types.is_numeric_dtype(f[c]) for f in frames)]  # fmt: skip
    means = pd.concat([f.set_index("group_id")[columns] for f in frames]).groupby(level=0, sort=False).mean()
    return frames[0][["group_id", "domain", "family"]].join(means, on="group_id")


def pool_seeds(
    frames: dict[str, pd.DataFrame], families: dict[str, str]
) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, pd.DataFrame]]]:
    """({arm family: per-task x̄_t over its finished seeds}, {arm family: {seed arm: its table}}), families in
    the order of their first arm. Raises ValueError when a family's seeds hold different held-out tasks."""
    members: dict[str, dict[str, pd.DataFrame]] = {}
    for name, frame in frames.items():
        members.setdefault(families.get(name, name), {})[name] = frame
    for fam, seeds in members.items():
        tasks = {name: set(frame["group_id"]) for name, frame in seeds.items()}
        first = next(iter(tasks.values()))
        if any(t != first for t in tasks.values()):
            shared = set.intersection(*tasks.values())
            counts = ", ".join(f"{name}: {len(t)} tasks" for name, t in tasks.items())
            raise ValueError(
                f"arm {fam!r}: its seeds were evaluated on different held-out tasks ({counts}; {len(shared)} in all): "
                "seeds are pooled per task, so every seed must run on one build of the groups (rerun the odd ones)"
            )
    return {fam: _seed_mean(list(seeds.values())) for fam, seeds in members.items()}, members


def _row(comparison: str, arm: str, against: str, fam: str, metric: str, ref: pd.Series, value: pd.Series) -> dict:
    test = paired_test(ref.tolist(), value.tolist())
    ci = bootstrap_ci(ref.tolist(), value.tolist(), BOOTSTRAP["n_resamples"], BOOTSTRAP["confidence"], BOOTSTRAP["seed"])
    return {
        "comparison": comparison, "arm": arm, "against": against, "family": fam, "metric": metric,
        "n_tasks": len(ref), "reference": float(ref.mean()), "value": float(value.mean()),
        "diff": float((value - ref).mean()), "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
        "p_value": test.p_value,
        # the paired difference this many tasks detect at α = 0.01 with 80 % power, from the observed sd of differences
        "detectable": detectable_effect(float((value - ref).std(ddof=1)), len(ref), ALPHA, POWER) if len(ref) > 1 else None,
    }  # fmt: skip


def _spread(seeds: dict[str, pd.DataFrame], fam: str, metric: str) -> dict:
    """min, max and sd over seeds of the per-seed mean tuned value m_s on the family's tasks (None for one seed)."""
    means = pd.Series([float(f.loc[f["family"] == fam, f"tuned_{metric}"].mean()) for f in seeds.values()])
    if len(means) < 2:
        return {"seed_min": None, "seed_max": None, "seed_sd": None}
    return {"seed_min": float(means.min()), "seed_max": float(means.max()), "seed_sd": float(means.std(ddof=1))}


def seed_label(name: str, arm_fam: str) -> str:
    """`gapo-s2` of the arm family `gapo` -> `s2`; an arm without seeds -> '' (its one seed)."""
    return name[len(arm_fam) + 1 :] if name.startswith(f"{arm_fam}-") else ""


def seed_differences(arm: dict[str, pd.DataFrame], fam: str, metric: str, against: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per seed and task of the family: `seed` (its label), `group_id`, `d` = tuned − base of that
    seed, or with `against` ({label: table}) the arm's tuned value − the other arm's of the same seed label."""
    parts = []
    for tag, frame in arm.items():
        tasks = frame[frame["family"] == fam].set_index("group_id")
        if against is None:
            d = tasks[f"tuned_{metric}"] - tasks[f"base_{metric}"]
        elif tag in against:
            d = (tasks[f"tuned_{metric}"] - against[tag].set_index("group_id")[f"tuned_{metric}"]).dropna()
        else:
            continue
        parts.append(pd.DataFrame({"seed": tag, "group_id": d.index, "d": d.to_numpy(dtype=float)}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["seed", "group_id", "d"])


def seed_level(diffs: pd.DataFrame) -> dict:
    """The seed-level columns of one row from its `seed_differences`: per-seed d_s, the t-test over seeds,
    the mixed model with seed and task random (module docstring)."""
    per_seed = diffs.groupby("seed", sort=False)["d"].mean()
    if per_seed.empty:
        return {"n_seeds": 0}
    test = seed_level_test(per_seed.to_numpy())
    mixed = mixed_model_test(diffs, "d", "seed", "group_id")
    return {
        "n_seeds": test.n, "seed_diffs": json.dumps({k: float(v) for k, v in per_seed.items()}),
        "seed_diff": test.mean, "seed_ci_low": test.ci_low, "seed_ci_high": test.ci_high, "seed_p_value": test.p_value,
        "mixed_diff": mixed.estimate if mixed.usable else None, "mixed_ci_low": mixed.ci_low, "mixed_ci_high": mixed.ci_high,
        "mixed_p_value": mixed.p_value, "mixed_p_wald": mixed.p_value_wald,
        "mixed_seed_sd": None if mixed.seed_var is None else max(mixed.seed_var, 0.0) ** 0.5,
        "mixed_task_sd": None if mixed.group_var is None else max(mixed.group_var, 0.0) ** 0.5, "mixed_note": mixed.note,
    }  # fmt: skip


def diversity_table(arms: dict[str, pd.DataFrame], compare: list[tuple[str, str]],
                    seeds: dict[str, dict[str, pd.DataFrame]] | None = None) -> pd.DataFrame:  # fmt: skip
    """Every arm against the base, then every `compare` pair head to head; q over all rows. `arms`: per-task
    tables (an arm family's seed-averaged, `pool_seeds`); `seeds`: each family's seed tables, for the spread
    and the seed-level columns (an arm left out is one seed); q_seed over the rows' seed-level p."""
    seeds = seeds or {}

    def n_seeds(name: str) -> int:
        return len(seeds.get(name, {})) or 1

    def by_label(name: str) -> dict[str, pd.DataFrame]:
        return {seed_label(arm, name): frame for arm, frame in (seeds.get(name) or {name: arms[name]}).items()}

    rows = []
    for name, frame in arms.items():
        for fam, tasks in frame.groupby("family", sort=True):
            for metric in metrics_of(fam):
                rows.append({**_row("vs base", name, "base", fam, metric, tasks[f"base_{metric}"], tasks[f"tuned_{metric}"]),
                             "seeds": n_seeds(name), "against_seeds": n_seeds(name), **_spread(seeds.get(name, {}), fam, metric),
                             **seed_level(seed_differences(by_label(name), fam, metric))})  # fmt: skip
    for a, b in compare:
        if a not in arms or b not in arms:
            continue
        joined = arms[a].merge(arms[b], on=["group_id", "family"], suffixes=("_a", "_b"))
        for fam, tasks in joined.groupby("family", sort=True):
            for metric in metrics_of(fam):
                rows.append({**_row("head to head", a, b, fam, metric, tasks[f"tuned_{metric}_b"], tasks[f"tuned_{metric}_a"]),
                             "seeds": n_seeds(a), "against_seeds": n_seeds(b),
                             **seed_level(seed_differences(by_label(a), fam, metric, by_label(b)))})  # fmt: skip
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c not in ("q_value", "seed_q_value")])
    table["q_value"] = benjamini_hochberg([None if pd.isna(p) else float(p) for p in table["p_value"]])
    table["seed_q_value"] = benjamini_hochberg([None if pd.isna(p) else float(p) for p in table["seed_p_value"]])
    return table[COLUMNS]


def power_lines(table: pd.DataFrame, trained: dict[str, set[str]] | None = None) -> list[str]:
    """Per head-to-head pair and task family both arms train on (`trained`: {arm: task families}; an arm
    left out trains on all), whether the design detects a difference of POWERED_AT in the family's first
    metric (list and counting: all options named; arithmetic: accuracy) at α 0.01 with 80 % power."""
    trained = trained or {}
    rows = [r for _, r in table[table["comparison"] == "head to head"].iterrows()
            if r["metric"] == metrics_of(r["family"])[0]
            and all(r["family"] in trained.get(arm, {r["family"]}) for arm in (r["arm"], r["against"]))]  # fmt: skip
    pairs = list(dict.fromkeys((r["arm"], r["against"]) for r in rows))
    lines = []
    for r in sorted(rows, key=lambda r: (pairs.index((r["arm"], r["against"])), family_order(r["family"]))):
        what = f"{r['arm']} vs {r['against']}, {FAMILY_LABELS.get(r['family'], r['family'])}, {metric_label(r['family'], r['metric'])}"
        seeds = f"{r['seeds']} and {r['against_seeds']} seeds" if max(r["seeds"], r["against_seeds"]) > 1 else "one seed each"
        if r["detectable"] is None or pd.isna(r["detectable"]):
            lines.append(f"- **not powered**: {what}: the differences of the {r['n_tasks']} tasks ({seeds}) have no "
                         "spread, so no detectable difference can be computed")  # fmt: skip
            continue
        verdict, sign = ("powered", "≤") if r["detectable"] <= POWERED_AT else ("not powered", ">")
        lines.append(f"- **{verdict}**: {what}: {r['n_tasks']} tasks ({seeds}) detect {number(r['detectable'])} {sign} "
                     f"{number(POWERED_AT, 2)} (α {ALPHA}, {percent(POWER)} power)")  # fmt: skip
    return lines


def _significant(q, alpha: float) -> bool:
    return q is not None and not pd.isna(q) and q < alpha


def verdict(row: pd.Series, alpha: float) -> str:
    """Where the row is significant (q < α): `both` levels, `task only`, `seed only` or `neither`."""
    task, seed = _significant(row["q_value"], alpha), _significant(row["seed_q_value"], alpha)
    return {(True, True): "both", (True, False): "task only", (False, True): "seed only"}.get((task, seed), "neither")


def _per_seed(cell) -> str:
    if not isinstance(cell, str):
        return "n/a"
    return ", ".join(f"{k} {signed(v)}".strip() for k, v in json.loads(cell).items())


def seed_level_table(rows: pd.DataFrame, fam: str, alpha: float) -> list[str]:
    """The family's seed-level table: per-seed d, d̄ [t CI] with p and q over seeds, the mixed model, the verdict."""
    lines = ["| comparison | metric | seeds | d per seed | d̄ [95 % CI] | p | q | mixed model μ̂ [95 % CI] | p | σ seed | "
             f"task-level q | significant (q < {alpha}) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for _, r in rows.iterrows():
        d = f"{number(r['seed_diff'], 3)} [{number(r['seed_ci_low'])}, {number(r['seed_ci_high'])}]"
        if not pd.isna(r["seed_diff"]):
            d = f"{signed(r['seed_diff'])} {interval(r['seed_ci_low'], r['seed_ci_high'], number)}"
        q = p_value(r["seed_q_value"])
        if _significant(r["seed_q_value"], alpha):
            d, q = f"**{d}**", f"**{q}**"
        mixed, mixed_p = f"n/a: {r['mixed_note']}" if isinstance(r["mixed_note"], str) else "n/a", "n/a"
        if not pd.isna(r["mixed_diff"]):
            mixed, mixed_p = (
                f"{signed(r['mixed_diff'])} {interval(r['mixed_ci_low'], r['mixed_ci_high'], number)}",
                p_value(r["mixed_p_value"]),
            )
        lines.append(f"| {r['arm']} vs {r['against']} | {metric_label(fam, r['metric'])} | {r['n_seeds']} | {_per_seed(r['seed_diffs'])} | "
                     f"{d} | {p_value(r['seed_p_value'])} | {q} | {mixed} | {mixed_p} | {number(r['mixed_seed_sd'])} | "
                     f"{p_value(r['q_value'])} | {verdict(r, alpha)} |")  # fmt: skip
    return lines


def changed_conclusions(table: pd.DataFrame, alpha: float) -> str:
    """One sentence: how many task-level findings (q < α) hold at the seed level, and the head-to-head ones that
    do not (or that only the seed level finds)."""
    if table.empty or not (table["n_seeds"] > 1).any():
        return "**One seed an arm**: no seed-level inference is possible; the task-level rows stand alone and ignore seed variation."
    verdicts = table.apply(verdict, axis=1, alpha=alpha)
    task, kept = int(verdicts.isin(["both", "task only"]).sum()), int((verdicts == "both").sum())
    nominal = int(((verdicts == "task only") & (table["seed_p_value"] < 0.05)).sum())
    changed = table[verdicts.isin(["task only", "seed only"]) & (table["comparison"] == "head to head")]
    named = []
    for (a, b, fam), rows in changed.groupby(["arm", "against", "family"], sort=False):
        metrics = ", ".join(f"{metric_label(fam, r['metric'])} ({signed(r['seed_diff'])}, seed-level p {p_value(r['seed_p_value'])}, "
                            f"task-level q {p_value(r['q_value'])})" for _, r in rows.iterrows())  # fmt: skip
        named.append(f"{a} vs {b} on {FAMILY_LABELS.get(fam, fam)}: {metrics}")
    n = int(table["n_seeds"].max())
    if task == kept and not named:
        return (f"**The conclusions hold at the seed level**: all {task} comparisons significant over tasks (q < {alpha}) are "
                f"significant over the n = {n} seeds too.")  # fmt: skip
    head = "; head to head, the verdict changes for " + "; ".join(named) if named else "; no head-to-head verdict changes"
    return (f"**The conclusion changes at the seed level**: of the {task} comparisons significant over tasks (task-level "
            f"q < {alpha}), {kept} stay significant over the n = {n} seeds (seed-level q < {alpha}) and {task - kept} do not "
            f"({nominal} of these with seed-level p < 0.05 before the correction){head}.")  # fmt: skip


def seed_lines(table: pd.DataFrame) -> list[str]:
    """The seed-to-seed spread of every arm with more than one finished seed (its base rows)."""
    rows = table[(table["comparison"] == "vs base") & (table["seeds"] > 1)]
    if rows.empty:
        return []
    lines = ["", "## Seeds", "",
             "An arm with seeds is the mean over its seeds per task (base and tuned alike); the tests above run over "
             "tasks on those means. Its spread: the mean over tasks of each seed's tuned value.", "",
             "| arm | family | metric | seeds | arm (mean of seeds) | per-seed min – max | per-seed sd |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for _, r in rows.sort_values("family", key=lambda c: c.map(family_order), kind="stable").iterrows():
        lines.append(f"| {r['arm']} | {FAMILY_LABELS.get(r['family'], r['family'])} | {metric_label(r['family'], r['metric'])} | "
                     f"{r['seeds']} | {number(r['value'])} | {number(r['seed_min'])} – {number(r['seed_max'])} | {number(r['seed_sd'])} |")  # fmt: skip
    return lines


def render_markdown(name: str, table: pd.DataFrame, arms: dict[str, dict], trained_on: dict[str, str], command: str,
                    machines: dict[str, str] | None = None, alpha: float = 0.01, earlier: list[str] | None = None,
                    trained: dict[str, set[str]] | None = None) -> str:  # fmt: skip
    """results/NAME/report.md: the arms (with the machine each ran on, `components.machine`), whether
    each head-to-head is powered, the seed-level inference (primary) and whether it changes a conclusion, per family
    a seed-level and a task-level table (base comparisons and head-to-head), the seeds' spread.
    `earlier`: seeded arms reported from their earlier unseeded runs (`finished_arms`); `trained`: `power_lines`."""
    machines = machines or {}
    lines = [f"# Study `{name}`: per task family, paired against the base model and between arms", "",
             f"Regenerate: `{command}` (the report alone: `{command} --report-only`). Each arm trains on the "
             "families it names and is evaluated on every held-out task; a family an arm did not train on is its "
             "capability check. Task-level rows (treats tasks as independent; ignores seed variation): "
             "d = tuned − reference, mean over held-out tasks, 95 % paired bootstrap CI, "
             f"paired t-test p, q = Benjamini–Hochberg over every task-level row of this report; **bold**: q < {alpha}.", "",
             "| arm | trains on | machine | description |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {a} | {trained_on.get(a, 'n/a')} | {machines.get(a, 'n/a')} | {arms[a].get('description', '')} |"
              for a in arms]  # fmt: skip
    if len(set(machines.values())) > 1:
        lines += ["", f"**Arms ran on different machines** ({', '.join(sorted(set(machines.values())))}): sampling "
                  "is reproducible on one kind of machine only, so comparisons between these arms mix in the "
                  "machines' difference; rerun them on one machine before reading a head-to-head row."]  # fmt: skip
    if earlier:
        lines += ["", f"**No seeded arm has finished yet**: {', '.join(earlier)} are reported from their earlier runs "
                  "without seeds (`arms/<arm>/`), on the held-out tasks those runs were evaluated on."]  # fmt: skip
    if table.empty:
        return "\n".join([*lines, "", "No arm has finished yet.", ""])
    lines += ["", "## Seed-level inference (primary)", "",
              "Seeds are the unit of replication for a training method: a new run of the method is a new seed, and "
              "the held-out tasks of one seed share its training run, so the seed-level test is the primary one. Per "
              "comparison, d per seed = the mean over the family's tasks of (tuned − reference) of that seed (head to "
              "head: arm A's seed − arm B's seed of the same index, which drew the same base samples); d̄ = their "
              "mean over the n seeds with its 95 % t-interval and one-sample t-test p (df = n − 1), q = "
              f"Benjamini–Hochberg over the seed-level rows; **bold**: q < {alpha}. Mixed model (secondary): the task-level "
              "differences d_{s,t} = μ + u_s + v_t + ε_{s,t}, seed and task random (REML, statsmodels MixedLM), μ̂ "
              "with its 95 % CI and p on t with n − 1 df (statsmodels' Wald z p: `mixed_p_wald` in table.csv); n/a, "
              "with the reason, where it does not converge or estimates the seed variance at 0, and the seed-level "
              f"t-test then stands alone. With n = {int(table['n_seeds'].max())} seeds the test has "
              f"{max(int(table['n_seeds'].max()) - 1, 0)} degrees of freedom: only effects large against their "
              "seed-to-seed spread reach significance.", "", changed_conclusions(table, alpha)]  # fmt: skip
    power = power_lines(table, trained)
    if power:
        lines += ["", f"## Power (head to head: detectable difference ≤ {number(POWERED_AT, 2)})", "",
                  "Task-level power (tasks as independent replicates); the seed-level test's power is set by the n seeds "
                  "and the seed-to-seed spread of d.", "", *power]  # fmt: skip
    for fam in sorted(table["family"].unique(), key=family_order):
        rows = table[table["family"] == fam]
        lines += ["", f"## {FAMILY_LABELS.get(fam, fam)}", "", "**Seed-level (primary)**:", "",
                  *seed_level_table(rows, fam, alpha), "",
                  "**Task-level (treats tasks as independent; ignores seed variation)**:", "",
                  "| comparison | metric | tasks | reference | arm | d [95 % CI] | p | q | detectable (α 0.01, 80 %) |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for _, r in rows.iterrows():
            d = f"{signed(r['diff'])} {interval(r['ci_low'], r['ci_high'], number)}"
            q = p_value(r["q_value"])
            if r["q_value"] is not None and not pd.isna(r["q_value"]) and r["q_value"] < alpha:
                d, q = f"**{d}**", f"**{q}**"
            lines.append(f"| {r['arm']} vs {r['against']} | {metric_label(fam, r['metric'])} | {r['n_tasks']} | "
                         f"{number(r['reference'])} | {number(r['value'])} | {d} | {p_value(r['p_value'])} | {q} | {number(r['detectable'], 2)} |")  # fmt: skip
    return "\n".join([*lines, *seed_lines(table), ""])


def plot(table: pd.DataFrame, path: Path) -> Path:
    """One panel per family: each arm's tuned value of the family's first metric, base dashed, CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base_rows = table[table["comparison"] == "vs base"]
    families = sorted(base_rows["family"].unique(), key=family_order)
    fig, axes = plt.subplots(1, max(1, len(families)), figsize=(4.2 * max(1, len(families)), 3.6), squeeze=False)
    for ax, fam in zip(axes[0], families):
        metric = metrics_of(fam)[0]
        rows = base_rows[(base_rows["family"] == fam) & (base_rows["metric"] == metric)]
        xs = range(len(rows))
        low = (rows["diff"] - rows["ci_low"]).fillna(0).clip(lower=0)
        high = (rows["ci_high"] - rows["diff"]).fillna(0).clip(lower=0)
        ax.bar(list(xs), rows["value"], yerr=[low, high], capsize=3, color="#4c72b0")
        ax.axhline(float(rows["reference"].iloc[0]), ls="--", color="grey", label="base")
        ax.set_xticks(list(xs), rows["arm"], rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{FAMILY_LABELS.get(fam, fam)}\n{metric_label(fam, metric)}", fontsize=9)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_diversity_report(name: str, layout: StudyLayout, arms: dict[str, dict], compare: list[tuple[str, str]], command: str) -> Path:
    """report.md, table.csv (every row with its CI, p and q) and plot.png of the study's results
    folder (`components.study.layout`) from the finished arms."""
    arms_dir = layout.arms
    found, families, earlier = finished_arms(arms_dir, arms)
    pooled, seeds = pool_seeds(found, families)
    table = diversity_table(pooled, [tuple(pair) for pair in compare], seeds)
    trained_on, machines, shown, trained = {}, {}, dict(arms), {}
    for arm in found:
        record = json.loads((Path(arms_dir) / arm / ARM_FILE).read_text())
        domains = ((record.get("overrides") or {}).get("train") or {}).get("domains")
        trained_on[arm] = ", ".join(domains) if domains else "all training tasks"
        machines[arm] = machine_label(record.get("machine"))
        shown.setdefault(arm, {"description": f"{record.get('description', '')} (earlier run, no seeds)"})
        tasks = pooled[families[arm]]  # the task families it trains on, among those it was evaluated on
        trained.setdefault(families[arm], {family(d) for d in tasks["domain"] if in_domains(d, domains)})
    layout.folder.mkdir(parents=True, exist_ok=True)
    table.to_csv(layout.table, index=False)
    if not table.empty:
        plot(table, layout.plot)
    body = render_markdown(name, table, shown, trained_on, command, machines, earlier=earlier, trained=trained)
    notes = layout.notes()
    if notes:
        body += "\n## Notes\n\n" + "".join(f"- {note}\n" for note in notes)
    if not table.empty:
        body += f"\n![{name}]({layout.plot.name})\n"
    return atomic_write_text(layout.report, body)
