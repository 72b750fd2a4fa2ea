"""The pipeline's steps as plain functions: the one entry point per step.

The Prefect flow (`flows.retrain`), the CLI (`groupwise <step>`) and the DVC stages (`dvc.yaml`
runs the CLI) all call these, so every route gives the same outputs. Each step reads its inputs
from the paths in params.yaml, writes its outputs there, and logs an MLflow run (a child of
`parent_run_id` when a flow runs the steps).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from components.config import Params
from components.hashing import files_sha256
from components.tracking import runs


@dataclass
class StepResult:
    step: str
    run_id: str
    outputs: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: str = ""


def _write_json(path: Path, payload: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as fh:
        json.dump(payload, fh, indent=2, sort_keys=True, default=str)
    Path(fh.name).replace(path)
    return path


def git_commit(root: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def params_hash(params: Params) -> str:
    payload = json.dumps(params.model_dump(mode="json", exclude={"paths", "tracking"}), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def build(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Templates -> PromptGroup JSONL files (consistency.jsonl, diversity.jsonl)."""
    from components.data import build_groups, write_groups

    with runs.step_run(params.tracking, "build_groups", params.section_dict("data", "seed"), parent_run_id) as run_id:
        groups = build_groups(params.paths.templates, params.data, params.seed)
        written = write_groups(groups, params.paths.groups)
        counts = {
            f"{task}_{split}": sum(g.task == task and g.split == split for g in groups)
            for task in ("consistency", "diversity")
            for split in ("train", "heldout")
        }
        runs.log_metrics(counts, prefix="groups.")
        runs.set_tags({"data.sha256": files_sha256(list(written.values()))})
        runs.log_artifacts(list(written.values()), "groups")
    summary = ", ".join(f"{k}={v}" for k, v in counts.items())
    return StepResult("build_groups", run_id, {k: str(v) for k, v in written.items()}, counts, summary)


def validate(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Great Expectations suite over the group files; raises GroupValidationError on any failure."""
    from components.validation import validate_groups
    from components.validation.tokens import TokenizerInfo, tokenizer_sha256

    report_path = params.paths.validation / "report.json"
    # the token rules need the base model's tokenizer: checked when the model is prepared (train and
    # evaluate validate again with it otherwise)
    tokenizer = TokenizerInfo.load(params.paths.base_model) if tokenizer_sha256(params.paths.base_model) else None
    with runs.step_run(params.tracking, "validate_groups", params.section_dict("data"), parent_run_id) as run_id:
        try:
            report = validate_groups(params.paths.groups, params.data, report_path, tokenizer)
        finally:
            runs.log_artifacts([report_path], "validation")
        runs.log_metrics({"validation.success": 1.0})
    return StepResult("validate_groups", run_id, {"report": str(report_path)}, {"success": report.success}, "all rules passed")


def prepare_model(params: Params, parent_run_id: str | None = None) -> StepResult:
    """GGUF (or tiny random) -> safetensors base model folder, reused when unchanged."""
    from components.models.provision import prepare_base_model

    with runs.step_run(params.tracking, "prepare_base_model", params.section_dict("model", "seed"), parent_run_id) as run_id:
        provenance = prepare_base_model(params.model, params.paths.base_model, params.seed)
        runs.log_metrics({"model.n_parameters": provenance.n_parameters})
        runs.set_tags(
            {"model.source": provenance.source, "model.gguf_sha256": provenance.gguf_sha256, "model.weights_sha256": provenance.weights_sha256}
        )
    summary = f"{provenance.source} model, {provenance.n_parameters / 1e6:.1f}M parameters"
    return StepResult("prepare_base_model", run_id, {"base_model": str(params.paths.base_model)}, asdict(provenance), summary)


def train(params: Params, parent_run_id: str | None = None, resume: bool = False) -> StepResult:
    """GRPO with LoRA on the train split; the adapter checkpoint is written atomically.

    Under torchrun every rank trains its share of each step's groups; only rank 0 talks to MLflow
    and writes the checkpoint. `resume=True` continues from `<checkpoints>/resume`.
    """
    from components.data import load_groups
    from components.grpo.checkpoint import ADAPTER_DIR, LOG_FILE, STATE_FILE
    from components.grpo.distributed import init_from_env
    from components.grpo.trainer import train as run_training
    from components.validation.precondition import ensure_validated

    checkpoint = params.paths.checkpoints / "latest"
    state_dir = params.paths.checkpoints / "resume"
    domains = params.train.domains
    ctx = init_from_env()
    if ctx.is_main:  # rank 0 guards: a failure stops it, and torchrun the others
        print(ensure_validated(params.paths.groups, params.data, params.paths.validation / "report.json", params.paths.base_model))
    groups = [
        g for g in load_groups(params.paths.groups, split="train")
        if g.task in params.train.tasks and (domains is None or g.domain in domains)
    ]  # fmt: skip
    if not groups:
        raise ValueError(f"no training groups for train.tasks {params.train.tasks} and train.domains {domains}")
    section = params.section_dict("train", "lora", "reward", "seed", "model")
    if not ctx.is_main:  # other ranks: same training, no tracking, no outputs
        result = run_training(params, groups, params.paths.base_model, checkpoint, resume=resume, state_dir=state_dir, ctx=ctx)
        return StepResult("train", "", {"checkpoint": str(checkpoint)}, result.final, f"rank {ctx.rank} done")
    with runs.step_run(params.tracking, "train", section, parent_run_id) as run_id:
        runs.set_tags({"train.world_size": ctx.world_size, "train.resumed": resume})
        result = run_training(
            params,
            groups,
            params.paths.base_model,
            checkpoint,
            on_step=lambda step, metrics: runs.log_metrics(metrics, step=step, prefix="train."),
            on_rollouts=lambda step, rows: runs.log_table(rows, f"rollouts/step_{step:05d}.json"),
            resume=resume,
            state_dir=state_dir,
            ctx=ctx,
        )
        # the adapter too: a refused adapter stays inspectable after `latest` is overwritten
        runs.log_artifacts([checkpoint / LOG_FILE, checkpoint / STATE_FILE, checkpoint / ADAPTER_DIR], "train")
        runs.log_metrics({"train.seconds": result.seconds, "train.samples": result.samples})
        if result.resumed_from:
            runs.set_tags({"train.resumed_from_step": result.resumed_from})
    final = result.final
    resumed = f" (resumed after step {result.resumed_from})" if result.resumed_from else ""
    summary = (
        f"{result.steps} steps, {result.samples} samples in {result.seconds:.0f} s{resumed}; "
        f"final reward {final.get('reward_mean', float('nan')):.3f}, KL {final.get('kl', float('nan')):.4f}"
    )
    return StepResult("train", run_id, {"checkpoint": str(checkpoint)}, final, summary)


def summary_settings(params: Params):
    """The evaluation's summary settings from params (significance, truncation rule, power, bootstrap)."""
    from components.evaluation.records import SummarySettings

    cfg = params.eval
    return SummarySettings(
        alpha=cfg.alpha, max_truncated_share=cfg.max_truncated_share, max_new_tokens=cfg.max_new_tokens,
        power=cfg.power, bootstrap_resamples=cfg.bootstrap_resamples, confidence_level=cfg.confidence_level,
        seed=params.seed,
    )  # fmt: skip


def evaluate(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Base vs tuned on the held-out groups: metrics.json, statistics, tables, plots, summary, HTML."""
    from components.data import load_groups
    from components.evaluation.comparisons import compare_all
    from components.evaluation.records import summarize
    from components.evaluation.report import write_report
    from components.evaluation.run import evaluate_models
    from components.grpo.checkpoint import ADAPTER_DIR, recover_checkpoint
    from components.registry.binding import METRICS_KEY as BINDING_KEY
    from components.registry.binding import EvaluationBinding, check_adapter_loads
    from components.validation.precondition import ensure_validated

    out = params.paths.reports
    cfg = params.eval
    adapter = params.paths.checkpoints / "latest" / ADAPTER_DIR
    if note := recover_checkpoint(params.paths.checkpoints / "latest"):
        print(note)
    print(ensure_validated(params.paths.groups, params.data, params.paths.validation / "report.json", params.paths.base_model))
    if cfg.candidate.source == "adapter":
        check_adapter_loads(adapter)
    # hashed before anything is loaded: what metrics.json vouches for is what was read
    binding = EvaluationBinding.of(params, adapter if cfg.candidate.source == "adapter" else None)
    with runs.step_run(params.tracking, "evaluate", params.section_dict("eval", "seed"), parent_run_id) as run_id:
        frames = evaluate_models(
            params, load_groups(params.paths.groups), params.paths.base_model, params.paths.checkpoints / "latest"
        )
        metrics = summarize(frames.consistency, frames.diversity, summary_settings(params))
        metrics["candidate"] = cfg.candidate.model_dump()
        metrics[BINDING_KEY] = binding.to_dict()
        metrics["helpfulness_definition"] = {"scope": params.reward.entropy_scope, "max_words": params.reward.entropy_max_words}
        metrics["engine"] = frames.engine.to_dict()
        if frames.engine.fell_back:
            metrics["notes"].insert(0, f"FALLBACK: {frames.engine.fallback_reason}; evaluated with {frames.engine.used}")
        settings = {"alpha": cfg.alpha, "confidence_level": cfg.confidence_level, "bootstrap_resamples": cfg.bootstrap_resamples, "seed": params.seed}
        comparisons = compare_all(
            frames.consistency, frames.diversity, alpha=cfg.alpha, n_resamples=cfg.bootstrap_resamples,
            confidence=cfg.confidence_level, seed=params.seed,
        )  # fmt: skip
        files = write_report(out, frames.consistency, frames.diversity, metrics, comparisons, settings, frames.generation)
        samples_path = out / "samples.csv"
        frames.samples.to_csv(samples_path, index=False)
        runs.log_metrics(metrics, prefix="eval.")
        runs.log_metrics(frames.generation, prefix="eval.generation.")
        runs.log_metrics(
            {f"{c.family}.{c.metric}{'.' + c.model if c.model else ''}.{k}": getattr(c, k)
             for c in comparisons if c.family == "base_vs_tuned" for k in ("delta", "q_bh")},
            prefix="eval.stats.",
        )  # fmt: skip
        runs.set_tags({"eval.engine": frames.engine.used, "eval.engine_fallback": frames.engine.fell_back})
        runs.log_artifacts([p for p in files.paths() if p not in files.plots()] + [samples_path], "evaluation")
        runs.log_artifacts(files.plots(), "evaluation/plots")
    c = metrics["consistency"]
    fallback = f" [FALLBACK to {frames.engine.used}]" if frames.engine.fell_back else ""
    q = "n/a" if c["q_value"] is None else f"{c['q_value']:.3g}"
    invalid = "" if c["valid"] else f" INVALID: {c['invalid_reason']};"
    summary = (
        f"held-out {c['axis']} gap {c['base_mean_gap']:.4f} (base) -> {c['tuned_mean_gap']:.4f} (tuned) "
        f"over {c['n_groups']} groups, paired t-test q (BH) = {q}; truncated {c['base_truncated_share']:.1%} / "
        f"{c['tuned_truncated_share']:.1%};{invalid} engine {frames.engine.used}{fallback}"
    )
    outputs = {k: str(v) for k, v in asdict(files).items()} | {"samples": str(samples_path)}
    return StepResult("evaluate", run_id, outputs, metrics, summary)


def dvc_md5(folder: Path) -> str:
    """DVC's own hash of a folder (`<md5>.dir`, as in dvc.lock), or 'unknown' when it is missing."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs import LocalFileSystem

    if not Path(folder).is_dir():
        return "unknown"
    fs = LocalFileSystem()
    with tempfile.TemporaryDirectory() as tmp:
        _, _, obj = build(HashFileDB(fs, tmp), str(folder), fs, "md5")
    return obj.hash_info.value


def write_gate_table(decision, folder: Path) -> list[Path]:
    """The gate verdicts as gates.csv and gates.md (one row per gate), written atomically."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("gates.csv", pd.DataFrame(decision.rows()).to_csv(index=False)), ("gates.md", decision.markdown())):
        with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as fh:
            fh.write(text)
        written.append(Path(fh.name).replace(folder / name))
    return written


def register(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Gate on metrics.json (vs base and vs the current champion); on pass register the adapter and
    move the alias, else register nothing. Idempotent: the same adapter and metrics give the same
    version (safe to retry)."""
    from components.grpo.checkpoint import ADAPTER_DIR, recover_checkpoint
    from components.registry.binding import check_evaluated
    from components.registry.gate import evaluate_gates, metrics_to_tags
    from components.tracking import model_registry

    metrics_path = params.paths.reports / "metrics.json"
    if not metrics_path.is_file():
        raise FileNotFoundError(f"{metrics_path}: no evaluation metrics; run `groupwise evaluate` first")
    metrics = json.loads(metrics_path.read_text())
    checkpoint = params.paths.checkpoints / "latest"
    if note := recover_checkpoint(checkpoint):
        print(note)
    reg = params.registry
    with runs.step_run(params.tracking, "register", params.section_dict("gate", "registry"), parent_run_id) as run_id:
        reigning = model_registry.champion(reg.model_name, reg.champion_alias)
        decision = evaluate_gates(metrics, params.gate, reigning)
        outcome: dict[str, Any] = {
            "passed": decision.passed,
            "gates": decision.to_dict()["results"],
            "champion": reigning.version if reigning else None,
        }
        for result in decision.results:
            if isinstance(result.value, (int, float)):
                runs.log_metrics({f"gate.{result.name}.value": result.value})
            runs.log_metrics({f"gate.{result.name}.threshold": result.threshold})
            runs.set_tags({f"gate.{result.name}": "pass" if result.passed else "fail"})
        runs.set_tags({"gate.passed": str(decision.passed).lower()})
        table = write_gate_table(decision, params.paths.registry)
        experiment = os.environ.get("DVC_EXP_NAME")  # set by DVC inside `dvc exp run`
        if decision.passed and experiment and not reg.register_experiments:
            outcome["registered"] = False
            outcome["reasons"] = [f"DVC experiment {experiment!r}: gates judged, nothing registered "
                                  "(an experiment is compared with `dvc exp show`, not promoted; "
                                  "registry.register_experiments: true registers it)"]  # fmt: skip
            runs.set_tags({"registry.skipped": "dvc experiment"})
            summary = f"gates passed; not registered: {outcome['reasons'][0]}"
        elif decision.passed:
            adapter = checkpoint / ADAPTER_DIR
            check_evaluated(params, metrics, metrics_path, adapter)  # publishes what was evaluated, or nothing
            tags = {
                "data.sha256": files_sha256(sorted(params.paths.groups.glob("*.jsonl"))),
                "data.dvc_md5": dvc_md5(params.paths.groups),
                "params.hash": params_hash(params),
                "git.commit": git_commit(params.root),
                "gate.passed": "true",
                "gate.champion_at_registration": reigning.version if reigning else "none",
                **{f"gate.{r.name}": "pass" for r in decision.results},
                **metrics_to_tags(metrics),
            }
            fingerprint = hashlib.sha256(
                (files_sha256(sorted(p for p in adapter.iterdir() if p.is_file())) + metrics_path.read_text()).encode()
            ).hexdigest()[:32]
            version = model_registry.register_adapter(
                adapter,
                params.paths.base_model,
                reg.model_name,
                reg.alias,
                tags,
                dtype=params.model.dtype,
                package_base_model=reg.package_base_model,
                fingerprint=fingerprint,
                lock_timeout=reg.lock_timeout_seconds,
            )
            runs.set_tags({"registry.version": version.version, "registry.reused": str(version.reused).lower()})
            outcome.update(model_name=version.name, version=version.version, alias=version.alias, uri=version.uri,
                           reused=version.reused, alias_moved=version.alias_moved)  # fmt: skip
            summary = f"{'already registered' if version.reused else 'registered'} {version.name} version {version.version}"
            if version.alias_moved:
                summary += f", @{version.alias} ({version.uri})"
            else:
                summary += f" (@{version.alias} stays on a newer version)"
        else:
            outcome["reasons"] = decision.reasons()
            summary = "gate refused, nothing registered: " + "; ".join(decision.reasons())
        decision_path = _write_json(params.paths.registry / "decision.json", outcome)
        runs.log_artifacts([decision_path, *table], "registry")
    return StepResult("register", run_id, {"decision": str(decision_path), "gates": str(table[1])}, outcome, summary)


STEPS = {
    "build": build,
    "validate": validate,
    "prepare-model": prepare_model,
    "train": train,
    "evaluate": evaluate,
    "register": register,
}
