"""The pipeline's steps as plain functions: the one entry point per step.

The Prefect flow (`flows.retrain`), the CLI (`groupwise <step>`) and the DVC stages (`dvc.yaml`
runs the CLI) all call these, so every route gives the same outputs. Each step reads its inputs
from the paths in params.yaml, writes its outputs there, and logs an MLflow run (a child of
`parent_run_id` when a flow runs the steps).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from components.config import Params, ParamsError
from components.contracts.errors import UserError
from components.contracts.version_tags import Provenance
from components.hashing import file_sha256, files_sha256
from components.tracking import runs


class MissingInputError(UserError, FileNotFoundError):
    """A step's input file is missing (the message names it and the command that writes it)."""


@dataclass
class StepResult:
    step: str
    run_id: str
    outputs: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    time: str = ""  # where the step's time went ("time: rollouts 61 %, ..."), for steps that time their phases


def build(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Templates (or `data.groups_file`, a user's own rows) -> PromptGroup JSONL files."""
    from components.data import write_groups
    from components.data.builder import groups_from_templates
    from components.data.importer import import_groups

    with runs.step_run(params.tracking, "build", params.section_dict("data", "seed"), parent_run_id) as run_id:
        decided = []
        if params.data.decision_groups is not None:  # beside templates' or own groups; needs `prepare-benchmarks`
            from components.data.decision_groups import load_decision_groups

            decided = load_decision_groups(params.data.decision_groups, params.paths.benchmarks)
        if params.data.groups_file is not None:
            source = params.root / params.data.groups_file
            groups, written = import_groups(source, params.paths.groups, params.data, params.seed, extra=decided)
            runs.set_tags({"data.source": str(source), "data.source_sha256": file_sha256(source)})
        else:
            groups = groups_from_templates(params) + decided
            written = write_groups(groups, params.paths.groups)
        counts = {
            f"{task}_{split}": sum(g.task == task and g.split == split for g in groups)
            for task in ("consistency", "diversity")
            for split in ("train", "heldout")
        }
        runs.log_metrics(counts, prefix="groups.")
        runs.set_tags(Provenance(data_sha256=files_sha256(list(written.values()))).to_tags())
        runs.log_artifacts(list(written.values()), "groups")
    summary = ", ".join(f"{k}={v}" for k, v in counts.items())
    return StepResult("build", run_id, {k: str(v) for k, v in written.items()}, counts, summary)


def validate(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Great Expectations suite over the group files; raises GroupValidationError on any failure."""
    from components.validation import validate_groups
    from components.validation.tokens import TokenizerInfo, tokenizer_sha256

    report_path = params.paths.validation / "report.json"
    # the token rules need the base model's tokenizer: checked when the model is prepared (train and
    # evaluate validate again with it otherwise)
    tokenizer = TokenizerInfo.load(params.paths.base_model) if tokenizer_sha256(params.paths.base_model) else None
    with runs.step_run(params.tracking, "validate", params.section_dict("data"), parent_run_id) as run_id:
        try:
            report = validate_groups(params.paths.groups, params.data, report_path, tokenizer, params.paths.instruction_families)
        finally:
            runs.log_artifacts([report_path], "validation")  # the Data Docs (~4 MB of HTML) stay on disk
        runs.log_metrics({"validation.success": 1.0})
    outputs = {"report": str(report_path), "data_docs": str(report.data_docs)}
    return StepResult("validate", run_id, outputs, {"success": report.success}, "all rules passed")


def prepare_model(params: Params, parent_run_id: str | None = None) -> StepResult:
    """GGUF (or tiny random) -> safetensors base model folder, reused when unchanged."""
    from components.models.provision import prepare_base_model

    with runs.step_run(params.tracking, "prepare-model", params.section_dict("model", "seed"), parent_run_id) as run_id:
        provenance = prepare_base_model(
            params.model, params.paths.base_model, params.seed, root=params.root, lora_targets=params.lora.target_modules
        )
        runs.log_metrics({"model.n_parameters": provenance.n_parameters})
        runs.set_tags(
            {
                "model.source": provenance.source,
                "model.gguf_sha256": provenance.gguf_sha256,
                "model.weights_sha256": provenance.weights_sha256,
                "model.origin": provenance.origin,
                "model.origin_sha256": provenance.origin_sha256,
                "model.architecture": provenance.architecture,
            }
        )
    summary = f"{provenance.source} model, {provenance.n_parameters / 1e6:.1f}M parameters"
    return StepResult("prepare-model", run_id, {"base_model": str(params.paths.base_model)}, asdict(provenance), summary)


def prepare_benchmarks(params: Params, parent_run_id: str | None = None) -> StepResult:
    """The decision benchmarks' data (`eval.fairness.benchmarks`) under params.paths.benchmarks:
    fetched once from the package index, every file checked against its recorded SHA-256."""
    from components.fairness_benchmarks import BENCHMARKS

    names = params.eval.fairness.benchmarks
    BENCHMARKS.check(names, where="eval.fairness.benchmarks")
    with runs.step_run(params.tracking, "prepare-benchmarks", {"eval.fairness.benchmarks": names}, parent_run_id) as run_id:
        outputs = {}
        for name in names:
            manifest = BENCHMARKS[name].prepare(params.paths.benchmarks / name)
            runs.set_tags({f"benchmark.{name}.{file}.sha256": sha for file, sha in manifest["files"].items()})
            outputs[name] = str(params.paths.benchmarks / name)
    summary = f"{', '.join(names)} ready" if names else "no decision benchmark configured (eval.fairness.benchmarks is empty)"
    return StepResult("prepare-benchmarks", run_id, outputs, {}, summary)


def _engine_log(params: Params) -> None:
    """vLLM's own log lines go to <paths.logs>/engines.log, not the console; said once per process and file."""
    from components.generation.vllm_process import log_engines_to

    path = params.paths.logs / "engines.log"
    if log_engines_to(path):
        print(f"[engines] vLLM's own log: {path}")


@contextmanager
def _resume_hint(state_dir: Path) -> Iterator[None]:
    """A full disk or a dead rollout engine during training: the one-line error also says where
    training can resume from (the last `train.save_every` state)."""
    from components.contracts.atomic import DiskFullError
    from components.contracts.checkpoint import latest_train_state
    from components.generation.vllm_process import EngineProcessError

    try:
        yield
    except (DiskFullError, EngineProcessError) as exc:
        saved = latest_train_state(state_dir)
        hint = f"training resumes from {saved} with --resume" if saved else "no resumable state was saved: train again"
        raise type(exc)(f"{exc}; {hint}") from exc


def train(params: Params, parent_run_id: str | None = None, resume: bool = False) -> StepResult:
    """GRPO with LoRA on the train split; the adapter checkpoint is written atomically.

    Under torchrun every rank trains its share of each step's groups; only rank 0 talks to MLflow
    and writes the checkpoint. `resume=True` continues from `<checkpoints>/resume`.
    """
    from components.contracts.checkpoint import ADAPTER_DIR, LOG_FILE, STATE_FILE, CheckpointLayout
    from components.data.selection import training_groups
    from components.grpo.distributed import init_from_env
    from components.grpo.trainer import train as run_training
    from components.grpo.trl_names import with_trl_names
    from components.plugins import check_registered_names
    from components.tracking import logged_model
    from components.tracking.outbox import Outbox
    from components.validation.precondition import ensure_params_validated

    check_registered_names(params)  # a misspelt estimator or reward fails before validation and sampling
    _engine_log(params)
    layout = CheckpointLayout(params.paths.checkpoints)
    checkpoint, state_dir = layout.latest, layout.resume
    domains = params.train.domains
    ctx = init_from_env(params.train.device)
    if ctx.is_main:  # rank 0 guards: a failure stops it, and torchrun the others
        print(ensure_params_validated(params))
    groups = training_groups(params.paths.groups, params.train)
    if not groups:
        raise ParamsError(f"no training groups for train.tasks {params.train.tasks} and train.domains {domains}")
    section = params.section_dict("train", "lora", "reward", "seed", "model")
    if not ctx.is_main:  # other ranks: same training, no tracking, no outputs
        result = run_training(params, groups, params.paths.base_model, checkpoint, resume=resume, state_dir=state_dir, ctx=ctx)
        return StepResult("train", "", {"checkpoint": str(checkpoint)}, result.final, f"rank {ctx.rank} done")
    with runs.step_run(params.tracking, "train", section, parent_run_id) as run_id, _resume_hint(state_dir):
        outbox = Outbox(params.tracking.uri, run_id)  # a tracking server restarted meanwhile loses nothing
        outbox.tags({"train.world_size": ctx.world_size, "train.resumed": resume})
        result = run_training(
            params,
            groups,
            params.paths.base_model,
            checkpoint,
            on_step=lambda step, metrics: outbox.metrics(with_trl_names(metrics), step=step, prefix="train."),
            on_rollouts=lambda step, rows: outbox.table(rows, f"rollouts/step_{step:05d}.json"),
            resume=resume,
            state_dir=state_dir,
            ctx=ctx,
        )
        # the adapter too: a refused adapter stays inspectable after `latest` is overwritten
        outbox.artifacts([checkpoint / LOG_FILE, checkpoint / STATE_FILE, checkpoint / ADAPTER_DIR], "train")
        outbox.metrics({"train.seconds": result.seconds, "train.samples": result.samples})
        if result.resumed_from:
            outbox.tags({"train.resumed_from_step": result.resumed_from})
        outbox.close(params.tracking.outage_seconds)
        # MLflow 3 lineage: the adapter is a LoggedModel of this run whatever its gates will say
        model_id = logged_model.log_adapter(
            checkpoint / ADAPTER_DIR,
            params.paths.base_model,
            params.model.dtype,
            params.registry.package_base_model,
            logged_model.file_inputs(_data_files(params), "training"),
        )
    final = result.final
    resumed = f" (resumed after step {result.resumed_from})" if result.resumed_from else ""
    summary = (
        f"{result.steps} steps, {result.samples} samples in {result.seconds:.0f} s{resumed}; "
        f"final reward {final.get('reward_mean', float('nan')):.3f}, KL {final.get('kl', float('nan')):.4f}"
    )
    outputs = {"checkpoint": str(checkpoint), "model": f"models:/{model_id}"}
    return StepResult("train", run_id, outputs, final, summary, result.time_line())


def evaluate(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Base vs tuned on the held-out groups: metrics.json, statistics, tables, plots, summary, HTML."""
    from components.evaluation.run import prepare_evaluation
    from components.reporting.evaluation_run import evaluate_and_report

    evaluated = prepare_evaluation(params)  # checks, and the hashes of what will be read, before anything is loaded
    _engine_log(params)
    with runs.step_run(params.tracking, "evaluate", params.section_dict("eval", "seed"), parent_run_id) as run_id:
        result = evaluate_and_report(params, evaluated)
        summary = result.summary.to_dict()
        _link_evaluation(params, evaluated.adapter_sha256, runs.metric_numbers(summary, "eval."))
        runs.log_metrics(result.frames.generation, prefix="eval.generation.")
        runs.log_metrics(result.base_vs_tuned_stats(), prefix="eval.stats.")
        runs.log_metrics(result.phase_seconds(), prefix="eval.time.")
        engine = result.frames.engine
        runs.set_tags({"eval.engine": engine.used, "eval.engine_fallback": engine.fell_back})
        runs.log_artifacts(result.artifacts(), "evaluation")
        runs.log_artifacts(result.files.plots(), "evaluation/plots")
    return StepResult("evaluate", run_id, result.outputs(), summary, result.headline(), result.time_line())


def _data_files(params: Params) -> dict[str, Path]:
    """The group files and their validation report, by the names MLflow shows them under."""
    files = {f"groups/{p.name}": p for p in sorted(params.paths.groups.glob("*.jsonl"))}
    return files | {"validation/report.json": params.paths.validation / "report.json"}


DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def _benchmark_files(params: Params) -> dict[str, Path]:
    """The decision benchmarks' data files (each benchmark's manifest names them; `DATA_SUFFIXES`)."""
    import json

    files = {}
    for name in params.eval.fairness.benchmarks:
        manifest = params.paths.benchmarks / name / "manifest.json"
        for file in json.loads(manifest.read_text())["files"] if manifest.is_file() else []:
            if Path(file).suffix in DATA_SUFFIXES:  # not its README or LICENSE
                files[f"benchmarks/{name}/{file}"] = params.paths.benchmarks / name / file
    return files


def _link_evaluation(params: Params, adapter_sha: str | None, metrics: dict[str, float]) -> None:
    """The evaluate run's inputs (groups, validation report, benchmark files) and its `eval.*`
    metrics, logged once: against the evaluated adapter's LoggedModel (`components.tracking.logged_model`;
    MLflow records them in the run too) when the train step logged one, else to the run alone. The run
    is tagged with the `model_id` ("none": the base model or an adapter trained elsewhere)."""
    from components.tracking import logged_model

    inputs = logged_model.file_inputs(_data_files(params) | _benchmark_files(params), "evaluation")
    model_id = logged_model.find_adapter_model(adapter_sha) if adapter_sha else None
    runs.set_tags({"eval.model_id": model_id or "none"})
    if model_id is None:
        logged_model.log_inputs(inputs)
        runs.log_metrics(metrics)
        return
    groups = next((i for i in inputs if i.name == "groups/consistency.jsonl"), None)
    logged_model.log_evaluation(model_id, metrics, inputs, scored_on=groups)


def register(params: Params, parent_run_id: str | None = None) -> StepResult:
    """Gate on metrics.json (vs base and vs the current champion); on pass register the adapter and
    move the alias, else register nothing (`components.release.registration`). Idempotent."""
    from components.contracts.checkpoint import CheckpointLayout, recover_checkpoint
    from components.contracts.summary import SUMMARY_FILE, read_summary
    from components.release.registration import gate_and_register

    metrics_path = params.paths.reports / SUMMARY_FILE
    if not metrics_path.is_file():
        raise MissingInputError(f"{metrics_path}: no evaluation metrics; run `groupwise evaluate` first")
    checkpoint = CheckpointLayout(params.paths.checkpoints).latest
    if note := recover_checkpoint(checkpoint):
        print(note)
    with runs.step_run(params.tracking, "register", params.section_dict("gate", "registry"), parent_run_id) as run_id:
        done = gate_and_register(params, read_summary(metrics_path), metrics_path, checkpoint)
        runs.log_artifacts(done.files, "registry")
    decision, gates = done.files[0], done.files[2]  # decision.json, gates.md
    return StepResult("register", run_id, {"decision": str(decision), "gates": str(gates)}, done.outcome, done.line)


STEPS = {
    "build": build,
    "validate": validate,
    "prepare-model": prepare_model,
    "prepare-benchmarks": prepare_benchmarks,
    "train": train,
    "evaluate": evaluate,
    "register": register,
}
