"""The GAPO and SEED-GRPO studies' results: per task family, paired against the base and between arms.

Every arm of a `report: diversity` study leaves `results/NAME/arms/<arm>/` holding its evaluation's
`per_group_diversity.csv` (one row per held-out task: `base_<m>` and `tuned_<m>`, K samples each)
and `arm.json`. A task's family is its domain up to the first '-' (the generated tasks of
`components.data.task_generators`: `list`, `count`, `arith`). Per arm, family and metric:

    d̄ = mean over tasks of (tuned − base), a paired percentile bootstrap CI, the paired t-test's p,
    and q = Benjamini–Hochberg over every test of the report (base comparisons and head-to-head).

Head-to-head rows (`study.compare: [[A, B]]`) pair arm A's tuned value with arm B's on the same
task: both evaluations draw the base with the same seed on the same prompts, so the tasks align.
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
from components.evaluation.metric_labels import label
from components.evaluation.statistics import benjamini_hochberg, bootstrap_ci, detectable_effect, paired_test
from components.study.layout import StudyLayout
from components.study.machine import machine_label
from components.study.report import ARM_FILE

TASKS_FILE = "per_group_diversity.csv"
FAMILY_LABELS = {"list": "list selection", "count": "constrained counting", "arith": "arithmetic"}
# metrics per family: arithmetic has one right answer, so validity is accuracy and coverage pass@K
FAMILY_METRICS = {
    "arith": ("validity", "coverage"),
    "*": ("all_valid", "coverage", "validity", "js_to_uniform"),
}
# arithmetic's own names; every other label is the report page's (components.evaluation.metric_labels)
ARITHMETIC_LABELS = {
    "validity": "accuracy (share of samples right)",
    "coverage": "pass@K (a task answered right at least once)",
}
COLUMNS = ["comparison", "arm", "against", "family", "metric", "n_tasks", "reference", "value", "diff",
           "ci_low", "ci_high", "p_value", "detectable", "q_value"]  # fmt: skip
ALPHA, POWER = 0.01, 0.8  # of the detectable difference
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


def diversity_table(arms: dict[str, pd.DataFrame], compare: list[tuple[str, str]]) -> pd.DataFrame:
    """Every arm against the base, then every `compare` pair head to head; q over all rows."""
    rows = []
    for name, frame in arms.items():
        for fam, tasks in frame.groupby("family", sort=True):
            for metric in metrics_of(fam):
                rows.append(_row("vs base", name, "base", fam, metric, tasks[f"base_{metric}"], tasks[f"tuned_{metric}"]))
    for a, b in compare:
        if a not in arms or b not in arms:
            continue
        joined = arms[a].merge(arms[b], on=["group_id", "family"], suffixes=("_a", "_b"))
        for fam, tasks in joined.groupby("family", sort=True):
            for metric in metrics_of(fam):
                rows.append(_row("head to head", a, b, fam, metric, tasks[f"tuned_{metric}_b"], tasks[f"tuned_{metric}_a"]))
    table = pd.DataFrame(rows, columns=COLUMNS[:-1])
    table["q_value"] = benjamini_hochberg([None if pd.isna(p) else float(p) for p in table["p_value"]])
    return table


def _num(value, digits: int = 3) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def _p(value) -> str:
    if value is None or pd.isna(value):
        return "n/a"
    return f"{value:.1e}" if value < 0.001 else f"{value:.3f}"


def render_markdown(name: str, table: pd.DataFrame, arms: dict[str, dict], trained_on: dict[str, str], command: str,
                    machines: dict[str, str] | None = None, alpha: float = 0.01) -> str:  # fmt: skip
    """results/NAME/report.md: the arms (with the machine each ran on, `components.study.machine`), then one
    table per family, base comparisons and head-to-head."""
    machines = machines or {}
    lines = [f"# Study `{name}`: per task family, paired against the base model and between arms", "",
             f"Regenerate: `{command}` (the report alone: `{command} --report-only`). Each arm trains on the "
             "families it names and is evaluated on every held-out task; a family an arm did not train on is its "
             "capability check. d = tuned − reference, mean over held-out tasks, 95 % paired bootstrap CI, "
             f"paired t-test p, q = Benjamini–Hochberg over every row of this report; **bold**: q < {alpha}.", "",
             "| arm | trains on | machine | description |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {a} | {trained_on.get(a, 'n/a')} | {machines.get(a, 'n/a')} | {arms[a].get('description', '')} |"
              for a in arms]  # fmt: skip
    if len(set(machines.values())) > 1:
        lines += ["", f"**Arms ran on different machines** ({', '.join(sorted(set(machines.values())))}): sampling "
                  "is reproducible on one kind of machine only, so comparisons between these arms mix in the "
                  "machines' difference; rerun them on one machine before reading a head-to-head row."]  # fmt: skip
    if table.empty:
        return "\n".join([*lines, "", "No arm has finished yet.", ""])
    for fam in sorted(table["family"].unique(), key=family_order):
        lines += ["", f"## {FAMILY_LABELS.get(fam, fam)}", "",
                  "| comparison | metric | tasks | reference | arm | d [95 % CI] | p | q | detectable (α 0.01, 80 %) |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for _, r in table[table["family"] == fam].iterrows():
            d = f"{r['diff']:+.3f} [{_num(r['ci_low'])}, {_num(r['ci_high'])}]"
            q = _p(r["q_value"])
            if r["q_value"] is not None and not pd.isna(r["q_value"]) and r["q_value"] < alpha:
                d, q = f"**{d}**", f"**{q}**"
            lines.append(f"| {r['arm']} vs {r['against']} | {metric_label(fam, r['metric'])} | {r['n_tasks']} | "
                         f"{_num(r['reference'])} | {_num(r['value'])} | {d} | {_p(r['p_value'])} | {q} | {_num(r['detectable'], 2)} |")  # fmt: skip
    return "\n".join([*lines, ""])


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
    found = load_arms(arms_dir, list(arms))
    table = diversity_table(found, [tuple(pair) for pair in compare])
    trained_on, machines = {}, {}
    for arm in found:
        record = json.loads((Path(arms_dir) / arm / ARM_FILE).read_text())
        domains = ((record.get("overrides") or {}).get("train") or {}).get("domains")
        trained_on[arm] = ", ".join(domains) if domains else "all training tasks"
        machines[arm] = machine_label(record.get("machine"))
    layout.folder.mkdir(parents=True, exist_ok=True)
    table.to_csv(layout.table, index=False)
    if not table.empty:
        plot(table, layout.plot)
    body = render_markdown(name, table, {a: arms[a] for a in arms}, trained_on, command, machines)
    notes = layout.notes()
    if notes:
        body += "\n## Notes\n\n" + "".join(f"- {note}\n" for note in notes)
    if not table.empty:
        body += f"\n![{name}]({layout.plot.name})\n"
    return atomic_write_text(layout.report, body)
