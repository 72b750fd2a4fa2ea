"""What one study arm's evaluation costs at the confirmation's size, phase by phase, and what it costs
when the study's arms share one base pass (`eval.seed` set for the study: the base model is sampled and
its decisions read once, `paths.base_outputs`).

    .venv/bin/python benchmarks/arm_evaluation.py --run     # build, validate and evaluate in this project, then summarise
    .venv/bin/python benchmarks/arm_evaluation.py           # summarise the project's last evaluation

`--run` evaluates the confirmation's 220 held-out groups (608 prompts x K = 6 = 3,648 sequences a model,
<= 512 tokens), DiscrimEval's 20 held-out questions at every age, race and gender (2,700 prompts a model)
and 400 BBQ items, with the study profile's settings (`paired-consistency`: float32 engines) and today's
defaults for what the confirmation's frozen params predate (`eval.vllm.block_size`). No adapter is
trained: the candidate is the base model sampled with another seed (`eval.candidate.source: base`,
`seed_offset: 1`), so both passes do the same kind of work, and a tuned model that answers more
briefly samples fewer tokens than this candidate does.

The summary reads the evaluation's statistics.json (each model's sampling, prefill and embedding
seconds) and its MLflow run (`eval.time.*`: engine start, embeddings and scoring, statistics and
report), and prints the arm's evaluation with the base's phases taken off: what an arm of a study
costs once the study's base pass is kept (its samples, decisions and sentence embeddings,
`paths.base_outputs`). It counts the candidate's sampling and embeddings as measured and, for the
decision benchmarks, the base's prefill seconds: a candidate that is the base model finds the base's
prompts in vLLM's prefix cache (the same weights), which an adapter's merged weights never do.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY_PATHS = [
    "paths.groups=data/groups_confirmation",
    "paths.validation=data/validation_confirmation",
    "paths.heldout_templates=data/confirmation/templates",
]
EVALUATION = [
    'eval.domains=[housing,health,education,car,"travel-*"]',
    "eval.max_consistency_groups=1000",
    "eval.candidate.source=base",
    "eval.candidate.seed_offset=1",
    "eval.seed=2001",
]
SHARED_PHASES = ("engine start", "embeddings and scoring", "statistics and report")  # once an evaluation, whatever is kept


def run(project: Path) -> None:
    """`groupwise build`, `validate` and `evaluate` at the confirmation's size, in `project`."""
    groupwise = [str(project / ".venv" / "bin" / "groupwise")]
    settings = [arg for pair in STUDY_PATHS for arg in ("-S", pair)]
    for step, extra in (("build", []), ("validate", []), ("evaluate", [arg for pair in EVALUATION for arg in ("-S", pair)])):
        command = [*groupwise, step, "--profile", "paired-consistency", *settings, *extra]
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, cwd=project, check=True)


def mlflow_phases(project: Path) -> dict[str, float]:
    """`eval.time.*` of the project's newest MLflow run that logged them, by phase."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    for found in client.search_runs(experiments, order_by=["attributes.start_time DESC"], max_results=50):
        phases = {name.removeprefix("eval.time."): value for name, value in found.data.metrics.items() if name.startswith("eval.time.")}
        if phases:
            return phases
    raise SystemExit(f"{project}: no MLflow run with eval.time.* metrics; run an evaluation first (--run)")


def summary(project: Path) -> list[str]:
    """`summary_lines` of the project's last evaluation (statistics.json and its MLflow run)."""
    generation = json.loads((project / "data" / "reports" / "statistics.json").read_text())["generation"]
    return summary_lines(generation, mlflow_phases(project))


def summary_lines(generation: dict, phases: dict[str, float]) -> list[str]:
    """The phase table, base and candidate side by side, and the arm's seconds with the base kept, from
    statistics.json's `generation` and the run's `eval.time.*` phases."""
    lines = [f"{'phase':<28}{'base s':>10}{'candidate s':>13}  rate (base / candidate)"]
    base_total = candidate_total = arm_total = embedding = 0.0
    for name, unit, per in (("sampling", "tokens", ("base", "tuned")), *(
        (f"{b} prefill", "prompts", (f"{b}_base", f"{b}_tuned")) for b in ("discrim_eval", "bbq")
    ), ("embeddings", "texts", ("embeddings_base", "embeddings_tuned"))):  # fmt: skip
        if per[0] not in generation:
            continue
        base, candidate = (generation[key] for key in per)
        base_total, candidate_total = base_total + base["seconds"], candidate_total + candidate["seconds"]
        # no prefix-cache reuse for an adapter: an arm pays the base's prefill seconds
        arm_total += base["seconds"] if name.endswith(" prefill") else candidate["seconds"]
        embedding += base["seconds"] + candidate["seconds"] if name == "embeddings" else 0.0
        rate = " / ".join(f"{m[unit] / m['seconds']:.1f}" if m["seconds"] else "kept" for m in (base, candidate))
        lines.append(
            f"{name:<28}{base['seconds']:>10.1f}{candidate['seconds']:>13.1f}  {rate} {unit}/s ({base[unit]:,} / {candidate[unit]:,} {unit})"
        )
    once = {name: phases.get(name, 0.0) for name in SHARED_PHASES}
    once["embeddings and scoring"] -= embedding  # the embedding calls are counted above, per model
    shared = sum(once.values())
    for name, seconds in once.items():
        label = "scoring" if name == "embeddings and scoring" else name
        lines.append(f"{label:<28}{seconds:>10.1f}  (once an evaluation)")
    whole = base_total + candidate_total + shared
    lines += [
        f"whole evaluation, base sampled and read: {whole:.1f} s",
        f"arm evaluation, the base shared: {arm_total + shared:.1f} s (target 1800 s; the candidate's sampling, the base's "
        f"prefill seconds; with the candidate's own prefill seconds {candidate_total + shared:.1f} s)",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=ROOT, help="the project (its .venv, data/ and mlruns/)")
    parser.add_argument("--run", action="store_true", help="build, validate and evaluate first (an hour or more on 2 cores)")
    args = parser.parse_args(argv)
    if args.run:
        run(args.project.resolve())
    print("\n".join(summary(args.project.resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
