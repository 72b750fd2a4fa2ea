"""Re-score a finished study arm from the samples it kept: the evaluation's scoring and statistics at
the arm's own size, each part timed, and its numbers against the arm's metrics.json.

    .venv/bin/python benchmarks/rescore_arm.py results/confirmation/arms/paired-consistency-s3

The arm's params are the study's (`study.domain.arm_params`: frozen params, then the arm's
overrides); its groups are built as the study's shared build step built them, with the study's params
and seed (`study_params`; templates and held-out templates, no model), and the
arm's `samples.csv.gz` (every base and tuned sample) goes through `run.score_samples` (embeddings,
per-group records), `summary.summarize` (the paired tests and bootstrap CIs of metrics.json's
`consistency` and `diversity`) and `comparisons.compare_all` (every paired comparison of the
report). Prints each part's seconds and the largest difference of any number of `consistency` and
`diversity` from the arm's metrics.json (embeddings in bf16 autocast differ from another machine's at
float rounding: the tolerance is printed with it). `--out` keeps the re-scored numbers and `--against`
compares with another re-scoring's, so two versions of the code can be set side by side on one
machine. The decision benchmarks need the engine: not here.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def largest_difference(ours: dict, theirs: dict, path: str = "") -> tuple[float, str]:
    """(largest |a − b| over the numbers both trees hold, its dotted path)."""
    worst = (0.0, "")
    for key in set(ours) & set(theirs):
        a, b, where = ours[key], theirs[key], f"{path}.{key}" if path else key
        if isinstance(a, dict) and isinstance(b, dict):
            worst = max(worst, largest_difference(a, b, where))
        elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            if math.isfinite(a) and math.isfinite(b):
                worst = max(worst, (abs(a - b), where))
    return worst


def arm_groups(arm: Path, params_file: Path) -> tuple:
    """(the arm's params, its consistency groups, its diversity tasks): the groups as the study's shared
    build step made them, once for every arm, with the study's params and seed (not the arm's seed,
    which would draw other phrasings), then the arm's evaluation selection."""
    from components.data.builder import groups_from_templates
    from components.evaluation.inputs import select_eval_groups
    from components.study.domain import arm_params, load_study, study_params

    study_name = arm.parent.parent.name
    params, study = load_study(params_file, None if study_name == "consistency" else study_name)
    shared, params = study_params(params, study), arm_params(params, study, arm.name)
    return (params, *select_eval_groups(groups_from_templates(shared), params))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arm", type=Path, help="a finished arm's folder (results/<study>/arms/<arm>)")
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    parser.add_argument("--out", type=Path, help="write the re-scored `consistency` and `diversity` here (JSON)")
    parser.add_argument("--against", type=Path, help="also compare with another re-scoring's --out (other code, same machine)")
    args = parser.parse_args()

    from components.evaluation.comparisons import compare_all
    from components.evaluation.run import score_samples, summary_settings
    from components.evaluation.summary import summarize

    arm = args.arm.resolve()
    started = time.perf_counter()
    params, consistency, diversity = arm_groups(arm, args.params)
    samples = pd.read_csv(arm / "samples.csv.gz", keep_default_na=False)
    loaded = time.perf_counter()
    rows_c, rows_d = score_samples(params, consistency + diversity, samples)
    scored = time.perf_counter()
    content = summarize(rows_c, rows_d, summary_settings(params))
    summarized = time.perf_counter()
    cfg = params.eval
    comparisons = compare_all(rows_c, rows_d, alpha=cfg.significance_level, n_resamples=cfg.bootstrap_resamples,
                              confidence=cfg.confidence_level, seed=params.eval_seed)  # fmt: skip
    compared = time.perf_counter()
    committed = json.loads((arm / "metrics.json").read_text())
    rescored = {section: content[section] for section in ("consistency", "diversity")}
    if args.out:
        args.out.write_text(json.dumps(rescored, indent=1, default=str))
    print(f"arm {arm.name}: {len(samples)} samples, {len(rows_c)} consistency groups, {len(rows_d)} diversity tasks")
    print(f"groups and samples read   {loaded - started:8.1f} s")
    print(f"embeddings and records    {scored - loaded:8.1f} s")
    print(f"summary (tests, CIs)      {summarized - scored:8.1f} s")
    print(f"all paired comparisons    {compared - summarized:8.1f} s  ({len(comparisons)} comparisons)")
    other = json.loads(args.against.read_text()) if args.against else None
    for section in ("consistency", "diversity"):
        diff, where = largest_difference(content[section], committed[section])
        print(f"{section}: largest difference from metrics.json {diff:.3g} at {where or '-'}")
        if other is not None:
            diff, where = largest_difference(rescored[section], other[section])
            print(f"{section}: largest difference from {args.against.name} {diff:.3g} at {where or '-'}")


if __name__ == "__main__":
    main()
