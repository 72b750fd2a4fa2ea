"""Evaluate, then report: base vs the candidate on the held-out groups (`components.evaluation.run`
samples and scores, `evaluation_summary` summarises), the paired tests, the gates of params.yaml on the
result, and the report folder (`evaluation_report.write_report`); the step's one-line headline."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from components.config import Params
from components.contracts.checkpoint import CheckpointLayout
from components.contracts.summary import EvaluatedFiles, EvaluationSummary
from components.evaluation.comparisons import compare_all
from components.evaluation.fairness import decisions_frame
from components.evaluation.run import EvaluationFrames, evaluate_models, evaluation_summary, fairness_results
from components.evaluation.statistics import Comparison
from components.formatting import number, p_value, percent, signed
from components.release.gate import evaluate_gates
from components.reporting.evaluation_report import ReportFiles, write_report
from components.validation.suite import DATA_DOCS_DIR


@dataclass
class Evaluation:
    """What `evaluate_and_report` produced: the summary, the frames, the paired tests and the files."""

    summary: EvaluationSummary
    frames: EvaluationFrames
    comparisons: list[Comparison]
    files: ReportFiles
    samples: Path
    statistics_seconds: float = 0.0  # the summary, the paired tests, the gates and the report folder

    def phase_seconds(self) -> dict[str, float]:
        """Where the evaluation's time went, in seconds: the engine start, sampling (base and candidate;
        0 where the base's outputs were cached), each fairness benchmark's prefill (base and candidate),
        embeddings and scoring, statistics and the report."""
        generation, phases = self.frames.generation, self.frames.phase_seconds
        return {
            "engine start": phases.get("engine start", 0.0),
            "sampling": sum(generation.get(model, {}).get("seconds", 0.0) for model in ("base", "tuned")),
            **{name: seconds for name, seconds in phases.items() if name.endswith(" prefill")},
            "embeddings and scoring": phases.get("embeddings and scoring", 0.0),
            "statistics and report": self.statistics_seconds,
        }

    def time_line(self) -> str:
        """`phase_seconds` in one line: "time: sampling 61 % (230 s), ..." with the total."""
        phases = {name: seconds for name, seconds in self.phase_seconds().items() if seconds > 0}
        total = sum(phases.values())
        if total <= 0:
            return ""
        shares = ", ".join(f"{name} {percent(seconds / total)}" for name, seconds in phases.items())
        return f"time: {shares} (of {number(total, 0)} s)"

    def outputs(self) -> dict[str, str]:
        """Every file written, by name: the report files and samples.csv."""
        return {name: str(path) for name, path in asdict(self.files).items()} | {"samples": str(self.samples)}

    def artifacts(self) -> list[Path]:
        """The report files but the plots, and samples.csv (the plots go to their own folder)."""
        return [p for p in self.files.paths() if p not in self.files.plots()] + [self.samples]

    def base_vs_tuned_stats(self) -> dict[str, float | None]:
        """`<family>.<metric>[.<model>].{delta,q_bh}` of the base-vs-tuned comparisons (MLflow metrics)."""
        return {f"{c.family}.{c.metric}{'.' + c.model if c.model else ''}.{k}": getattr(c, k)
                for c in self.comparisons if c.family == "base_vs_tuned" for k in ("delta", "q_bh")}  # fmt: skip

    def headline(self) -> str:
        """One line: the gap base -> tuned, its test, truncation, validity, the engine, each decision
        benchmark's gated scores base -> tuned and BBQ's bias scores and disambiguated accuracy."""
        c, engine = self.summary.consistency, self.frames.engine
        fallback = f" [FALLBACK to {engine.used}]" if engine.fell_back else ""
        q = p_value(c.q_value)
        invalid = "" if c.valid else f" INVALID: {c.invalid_reason};"
        decisions = "".join(
            f"; {name} "
            + ", ".join(
                f"{s.value} vs {s.baseline} {signed(s.base_score)} -> {signed(s.tuned_score)}"
                for key, s in b.scores.items()
                if key in b.gated and s.base_score is not None and s.tuned_score is not None
            )  # fmt: skip
            + f" logit ({b.n_prompts} prompts)"
            for name, b in self.summary.fairness.items()
        )
        if (b := self.summary.bbq) is not None:
            decisions += (
                f"; bbq s_DIS {signed(b.disambig_bias.base)} -> {signed(b.disambig_bias.tuned)}, s_AMB {signed(b.ambig_bias.base)} -> "
                f"{signed(b.ambig_bias.tuned)}, disambiguated accuracy {signed(b.disambig_accuracy.base)} -> "
                f"{signed(b.disambig_accuracy.tuned)} ({b.n_items} items, not gated)"
            )
        if (ins := self.summary.instructions) is not None:
            decisions += "".join(
                f"; {name} instruction families {percent(f.base_strict, 0)} -> {percent(f.tuned_strict, 0)} followed (strict, {f.n_groups} groups)"
                for name, f in (("train", ins.train), ("held-out", ins.heldout)) if f is not None
            )  # fmt: skip
        return (
            f"{'held-out' if self.summary.split == 'heldout' else self.summary.split} {c.axis} gap {number(c.base_mean_gap, 4)} (base) -> {number(c.tuned_mean_gap, 4)} (tuned) "
            f"over {c.n_groups} groups, paired t-test q (BH) = {q}; truncated {percent(c.base_truncated_share, 1)} / "
            f"{percent(c.tuned_truncated_share, 1)};{invalid} engine {engine.used}{fallback}{decisions}"
        )


def evaluate_and_report(params: Params, evaluated: EvaluatedFiles | None) -> Evaluation:
    """Base vs the candidate on the held-out groups: sample and score (`evaluate_models`), summarise
    (`evaluation_summary`), run the paired tests and write the report folder (params.paths.reports:
    metrics.json last, samples.csv after it)."""
    from components.data import load_groups

    cfg, out = params.eval, params.paths.reports
    frames = evaluate_models(
        params, load_groups(params.paths.groups), params.paths.base_model, CheckpointLayout(params.paths.checkpoints).latest
    )
    started = time.perf_counter()
    fairness = fairness_results(frames, params)
    summary = evaluation_summary(frames, params, evaluated, fairness)
    settings = {
        "alpha": cfg.significance_level,
        "confidence_level": cfg.confidence_level,
        "bootstrap_resamples": cfg.bootstrap_resamples,
        "seed": params.eval_seed,
    }
    comparisons = compare_all(
        frames.consistency, frames.diversity, alpha=cfg.significance_level, n_resamples=cfg.bootstrap_resamples,
        confidence=cfg.confidence_level, seed=params.eval_seed,
    ) + fairness.comparisons  # fmt: skip
    decision = evaluate_gates(summary, params.gate)  # the champion comparison is register's: it needs the registry
    note = "The gates of params.yaml on this evaluation; `register` also compares with the current champion."
    files = write_report(
        out, frames.consistency, frames.diversity, summary, comparisons, settings, frames.generation,
        decision, frames.samples, note, decisions_frame(frames.decisions), fairness.effects,
        data_docs=params.paths.validation / DATA_DOCS_DIR / "index.html", instructions=frames.instructions,
    )  # fmt: skip
    samples = out / "samples.csv"
    frames.samples.to_csv(samples, index=False)
    return Evaluation(summary, frames, comparisons, files, samples, time.perf_counter() - started)
