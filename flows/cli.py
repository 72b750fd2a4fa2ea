"""`groupwise` command line: one subcommand per pipeline step, and `retrain` for the whole flow."""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from components.contracts.errors import Preempted, UserError
from flows.console import quiet_console

app = typer.Typer(
    help="groupwise: group-relative RL for consistent and diverse LLMs.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
err = Console(stderr=True, soft_wrap=True)  # soft wrap: printed paths are never broken mid-path
out = Console(soft_wrap=True)

ParamsOpt = typer.Option(Path("params.yaml"), "--params", "-p", help="params file (its folder is the project root)")
ProfileOpt = typer.Option(
    None, "--profile", help="profile of params.yaml to apply over the file for this run (default: the file's own `profile` key)"
)
SetOpt = typer.Option(
    None,
    "--set",
    "-S",
    help="override a param for this run, e.g. -S train.rollout.engine=vllm (repeatable; the values `dvc exp run -S` reads)",
)


_DEBUG = {"on": False}


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="show the full traceback of a failure instead of one line"),
) -> None:
    _DEBUG["on"] = debug
    quiet_console()


RESUME_HINT = {  # how a command stopped by a signal continues
    "train": "continue: the same command with --resume",
    "retrain": "continue: the same command with --resume",
    "study": "continue: the same command (a study resumes its arm)",
}


@contextmanager
def _reported(command: str):
    """Errors the user can act on (`UserError`: bad params, data, paths, names; a missing file, model,
    package or server; a registry lock held too long; NaN/inf in training) end the command as one line
    naming `command`, with exit code 2; with --debug their traceback instead. Anything else is a bug
    and keeps its traceback (exit code 1). Also a decorator (see `_command`)."""
    try:
        yield
    except UserError as exc:
        if _DEBUG["on"]:
            raise
        err.print(f"[bold red]groupwise {command} failed:[/] {escape(str(exc))}")
        raise typer.Exit(code=2) from exc
    except Preempted as exc:  # a stop signal during training: the state is saved, the run KILLED
        err.print(f"[bold yellow]groupwise {command} stopped:[/] {escape(str(exc))}; {RESUME_HINT.get(command, RESUME_HINT['train'])}")
        raise typer.Exit(code=exc.exit_code) from exc


def _command(name: str):
    """Register the subcommand `name`; its user errors are reported in one line (`_reported`)."""
    return lambda fn: app.command(name)(_reported(name)(fn))


def _registry_params(params_path: Path, profile: Optional[str]):
    """params.yaml with its profile, and MLflow pointed at its tracking server: the preamble of every
    command that reads the model registry (versions, export, serve)."""
    from components.config import load_params
    from components.tracking import runs

    resolved = load_params(params_path, profile)
    runs.configure(resolved.tracking)
    return resolved


def _resolved_params(params_path: Path, profile: Optional[str], sets: Optional[list[str]] = None):
    """params.yaml with its profile and the --set overrides, every registered name checked."""
    from components.config import assignments_to_overrides, load_params, with_overrides
    from components.plugins import check_registered_names

    params = load_params(params_path, profile)
    if sets:
        params = with_overrides(params, assignments_to_overrides(sets))
    check_registered_names(params)
    return params


def _check_dvc_stage(name: str, params, sets: Optional[list[str]]) -> None:
    """A step run as a DVC stage (`dvc repro`, `dvc exp run`: DVC sets DVC_STAGE) runs what dvc.lock can
    record: no --set (DVC sees only params.yaml), and a file of one's own among the deps of the stage
    that reads it (else `dvc repro` would not rerun it when the file changes)."""
    from components.config import ParamsError
    from flows.pipeline import USER_FILES, check_declared, user_files

    if sets:
        raise ParamsError(
            f"--set {sets[0]} inside DVC stage {os.environ['DVC_STAGE']!r}, whose record lists params.yaml's values: "
            f"set it with `dvc exp run -S {sets[0]}` instead"
        )
    check_declared(params.root, {key: file for key, file in user_files(params).items() if name in USER_FILES[key]})


def _run_step(
    name: str, params_path: Path, profile: Optional[str], sets: Optional[list[str]] = None, command: str | None = None, **options
) -> None:
    from flows.steps import STEPS

    with _reported(command or name):  # in the command's name: `import` runs two steps
        params = _resolved_params(params_path, profile, sets)
        if os.environ.get("DVC_STAGE"):
            _check_dvc_stage(name, params, sets)
        started = time.perf_counter()
        result = STEPS[name](params, **options)
    out.print(f"[bold green]{result.step}[/] ({time.perf_counter() - started:.1f} s) {escape(result.summary)}")
    if result.time:
        out.print(f"  {escape(result.time)}")
    out.print(f"  MLflow run: {result.run_id}")
    for key, value in result.outputs.items():
        out.print(f"  {key}: {escape(value)}")


@_command("build")
def build(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt, sets: Optional[list[str]] = SetOpt) -> None:
    """Build prompt groups (PromptGroup JSONL) from data/templates."""
    _run_step("build", params, profile, sets)


@_command("import")
def import_(
    file: Path = typer.Argument(..., help="your groups: .jsonl or .csv, one row per prompt (docs/data.md)"),
    params: Path = ParamsOpt,
    profile: Optional[str] = ProfileOpt,
    sets: Optional[list[str]] = SetOpt,
) -> None:
    """Import your own prompt groups (instead of data/templates) and validate them like built ones.

    For the flow and `dvc repro`, set `data.groups_file` in params.yaml instead: the build step then imports it.
    """
    groups_file = [*(sets or []), f"data.groups_file={json.dumps(str(file.resolve()))}"]
    _run_step("build", params, profile, groups_file, command="import")
    _run_step("validate", params, profile, groups_file, command="import")


@_command("validate")
def validate(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt, sets: Optional[list[str]] = SetOpt) -> None:
    """Validate the group files with Great Expectations (fails naming file, rule and rows)."""
    _run_step("validate", params, profile, sets)


@_command("prepare-model")
def prepare_model(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt, sets: Optional[list[str]] = SetOpt) -> None:
    """Convert the embedded SmolLM2 GGUF (or build the tiny test model) to safetensors."""
    _run_step("prepare-model", params, profile, sets)


@_command("prepare-benchmarks")
def prepare_benchmarks(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt, sets: Optional[list[str]] = SetOpt) -> None:
    """Fetch the decision benchmarks' data (DiscrimEval) once and check every file's SHA-256."""
    _run_step("prepare-benchmarks", params, profile, sets)


@_command("train")
def train(
    params: Path = ParamsOpt,
    profile: Optional[str] = ProfileOpt,
    resume: bool = typer.Option(False, "--resume", help="continue from the newest state in <checkpoints>/resume"),
    sets: Optional[list[str]] = SetOpt,
) -> None:
    """GRPO fine-tuning with LoRA (writes data/checkpoints/latest). Multi-process: torchrun ... $(which groupwise) train."""
    _run_step("train", params, profile, sets, resume=resume)


@_command("evaluate")
def evaluate(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt, sets: Optional[list[str]] = SetOpt) -> None:
    """Evaluate base vs tuned on held-out groups (metrics.json, tables, plots)."""
    _run_step("evaluate", params, profile, sets)


@_command("register")
def register(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt, sets: Optional[list[str]] = SetOpt) -> None:
    """Apply the gates; on pass register the adapter in MLflow with the configured alias."""
    _run_step("register", params, profile, sets)


@_command("study")
def study(
    params: Path = ParamsOpt,
    arm: Optional[list[str]] = typer.Option(None, "--arm", help="run only this arm (repeatable); default: every arm"),
    report_only: bool = typer.Option(False, "--report-only", help="rewrite the study's report from finished arms"),
    freeze: bool = typer.Option(
        False, "--freeze-params", help="fix the params its arms start from (results/NAME/frozen_params.json), e.g. when pre-registering"
    ),
    name: Optional[str] = typer.Option(
        None, "--study", help="consistency (studies/consistency.yaml, the default) or another study of studies/ (gapo, seed, fairness)"
    ),
    submit: bool = typer.Option(
        False, "--submit", help="run the unfinished arms as flow runs on a Prefect work pool (needs PREFECT_API_URL); wait, then report"
    ),
    work_pool: str = typer.Option(
        "groupwise-study", "--work-pool", help="with --submit: the work pool (created as a process pool if missing)"
    ),
    concurrency: int = typer.Option(2, "--concurrency", help="with --submit: arms at once (the work pool's concurrency limit)"),
    store: Optional[Path] = typer.Option(
        None, "--store", help="a folder every worker shares (checkpoints and results of the arms); default $GROUPWISE_STUDY_STORE"
    ),
) -> None:
    """Run a study: arms in order, finished ones skipped; results/consistency/report.md (or results/NAME.md).

    With --submit every unfinished arm is a flow run of the deployment study-arm/groupwise-study-arm on a work pool."""
    from components.study.domain import load_study, pick_arms
    from components.study.reports import write_study_report
    from flows.study import study as study_flow

    pick_arms(load_study(params, name)[1], arm or None)  # an unknown study or arm: one line, before any server starts
    if freeze:
        from components.study.domain import freeze_params

        frozen = freeze_params(*load_study(params, name))
        out.print(f"[bold green]study[/] params frozen: {escape(str(frozen))}")
        return
    if report_only:
        from components.study.pool_arms import collect_results, store_path

        resolved, chosen = load_study(params, name)
        collect_results(resolved, chosen, store_path(store))
        path = write_study_report(chosen)
    elif submit:
        from flows.study_pool import submit_study

        path = submit_study(params, name, arm or None, work_pool, concurrency, store)
    else:
        from flows.prefect_api import prefect_api

        with prefect_api():
            path = study_flow(str(params), arm or None, name)
    out.print(f"[bold green]study[/] results: {escape(str(path))}")


@_command("retrain")
def retrain(
    params: Path = ParamsOpt,
    profile: Optional[str] = ProfileOpt,
    sets: Optional[list[str]] = SetOpt,
    resume: bool = typer.Option(False, "--resume", help="training continues from the state a stopped run saved"),
) -> None:
    """Run the whole Prefect `retrain` flow and print where every result is."""
    from components.machine import machine_line
    from flows.prefect_api import prefect_api
    from flows.retrain import retrain as retrain_flow

    resolved = _resolved_params(params, profile, sets)
    out.print(
        f"groupwise: {machine_line(resolved.eval.dtype, resolved.train.precision, resolved.eval.embedding_dtype, resolved.train.cpu_matmul)}"
    )  # once, before the flow
    started = time.perf_counter()
    with prefect_api():
        summary = retrain_flow(str(params), profile, list(sets or []), resume)
    out.print(f"[bold]groupwise retrain ({summary.profile})[/] in {time.perf_counter() - started:.0f} s")
    for r in summary.results:  # one line a step; its MLflow run is a child of the parent run below
        out.print(f"  {r.step}: {escape(r.summary)}", soft_wrap=False, no_wrap=True, overflow="ellipsis")
        if r.time:
            out.print(f"    {escape(r.time)}")
    files = {
        label: r.outputs[key] for r in summary.results for (step, key), label in KEY_OUTPUTS.items() if r.step == step and key in r.outputs
    }
    for label, path in files.items():
        out.print(f"  {label}: {escape(path)}")
    out.print(f"DVC: {escape(summary.dvc)}")
    out.print(f"MLflow: {resolved.tracking.uri} (experiment '{resolved.tracking.experiment}', parent run {summary.parent_run_id})")
    out.print(f"  browse: mlflow ui --backend-store-uri {resolved.tracking.uri}")
    reg = summary.registration
    if reg.get("passed"):
        out.print(f"[bold green]Registered[/] {reg['model_name']} version {reg['version']} as @{reg['alias']}: {reg['uri']}")
    else:
        out.print("[bold yellow]Gate refused; nothing registered.[/] Reasons:")
        for reason in reg.get("reasons", []):
            out.print(f"  - {escape(reason)}")
    out.print(f"Report (verdict, plots, every answer): {resolved.paths.reports / 'report.html'}")  # the last line: what to open


KEY_OUTPUTS = {  # the files of a retrain a user opens; every output is logged to the step's MLflow run
    ("validate", "data_docs"): "data docs",
    ("train", "checkpoint"): "adapter",
    ("evaluate", "summary"): "summary",
    ("evaluate", "metrics"): "metrics",
}


@_command("promote")
def promote(
    version: str = typer.Option(..., "--version", "-v", help="model version to make @champion"),
    reason: str = typer.Option("", "--reason", help="why (recorded on the version; required with --force)"),
    force: bool = typer.Option(False, "--force", help="promote although its gates failed (needs --reason)"),
    params: Path = ParamsOpt,
    profile: Optional[str] = ProfileOpt,
) -> None:
    """Move @champion to a registered version; the old champion becomes @previous-champion."""
    from components.config import load_params
    from flows.promote import promote as promote_version

    result = promote_version(load_params(params, profile), version, reason, force)
    forced = " [bold yellow](forced: gates overridden)[/]" if result.forced else ""
    out.print(f"[bold green]{result.name} version {result.version} is @champion[/]{forced}")
    out.print(f"  previous champion: {result.previous or 'none'}; history: {', '.join(result.history)}")


@_command("rollback")
def rollback(
    reason: str = typer.Option("", "--reason", help="why (recorded on the demoted version)"),
    params: Path = ParamsOpt,
    profile: Optional[str] = ProfileOpt,
) -> None:
    """Give @champion back to the previous champion."""
    from components.config import load_params
    from flows.promote import rollback as rollback_champion

    result = rollback_champion(load_params(params, profile), reason)
    out.print(f"[bold green]{result.name} version {result.version} is @champion again[/] (version {result.previous} demoted)")


@_command("versions")
def versions(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt) -> None:
    """List the registered versions with their aliases, gate verdict and promotion record."""
    from components.tracking.model_registry import list_versions

    resolved = _registry_params(params, profile)
    found = list_versions(resolved.registry.model_name)
    if not found:
        out.print(f"No version of {resolved.registry.model_name} is registered in {resolved.tracking.uri} yet: "
                  "`groupwise retrain` (or `groupwise register` after `evaluate`) registers one when its gates pass.")  # fmt: skip
        return
    table = Table(title=f"{resolved.registry.model_name} ({resolved.tracking.uri})")
    for column in ("version", "aliases", "gates", "code", "registered run", "promotion"):
        table.add_column(column, overflow="fold")
    for v in found:
        tags = v.record
        promotion = tags.promotion if tags.promotion is not None and tags.promotion.at else None
        record = f"{promotion.at} by {promotion.by}: {promotion.reason}" if promotion else ""
        gates = "?" if tags.gate_passed is None else str(tags.gate_passed).lower()
        table.add_row(v.version, ", ".join(v.aliases), gates, _code_cell(tags.provenance), v.run_id, escape(record))
    out.print(table)


def _code_cell(provenance) -> str:
    """The commit that evaluated a version (else the one that registered it), as `CodeVersion.short` writes it."""
    from components.code_version import CodeVersion

    if provenance is None or not (provenance.evaluated_commit or provenance.git_commit):
        return "?"
    if provenance.evaluated_commit:
        return provenance.evaluated_commit
    return CodeVersion(provenance.git_commit, provenance.git_dirty == "true", provenance.git_diff_sha256).short


VersionOpt = typer.Option(None, "--version", help="a registered version number")
AliasOpt = typer.Option(None, "--alias", help="the version an alias points at, e.g. champion")


@_command("export")
def export(
    out_dir: Path = typer.Argument(..., help="a new folder for the merged model"),
    version: Optional[str] = VersionOpt,
    alias: Optional[str] = AliasOpt,
    params: Path = ParamsOpt,
    profile: Optional[str] = ProfileOpt,
) -> None:
    """Write a registered version as one merged safetensors model folder (+ model card) for vLLM or transformers."""
    from components.tracking.export import export_version

    resolved = _registry_params(params, profile)
    exported = export_version(resolved.registry.model_name, out_dir, resolved.tracking.uri, version, alias)
    out.print(f"[bold green]{exported.model_name} version {exported.version}[/] merged into {escape(str(exported.path))}")


@_command("serve")
def serve(
    version: Optional[str] = VersionOpt,
    alias: Optional[str] = AliasOpt,
    port: int = typer.Option(8000, "--port", help="port on 127.0.0.1"),
    params: Path = ParamsOpt,
    profile: Optional[str] = ProfileOpt,
) -> None:
    """Serve a registered version on http://127.0.0.1:PORT/v1 (OpenAI-compatible chat, vLLM) until stopped."""
    from components.generation.serve import server_command
    from components.tracking.export import export_for_serving

    resolved = _registry_params(params, profile)
    exported = export_for_serving(resolved.registry.model_name, resolved.paths.exports, resolved.tracking.uri, version, alias)
    command = server_command(exported.path, resolved.registry.model_name, resolved.eval.vllm, port, resolved.model.dtype)
    err.print(
        f"serving {exported.model_name} version {exported.version} at {command.url}/v1 (model name {resolved.registry.model_name!r}); Ctrl-C stops it"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    # the server replaces this process: a signal to `groupwise serve` reaches vLLM, and no child is orphaned
    os.execve(command.argv[0], command.argv, command.env)


@_command("schedule")
def schedule(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt) -> None:
    """Serve the retrain flow on the cron of params.yaml `schedule:` (needs PREFECT_API_URL)."""
    from flows.schedule import serve_retrain

    serve_retrain(params, profile)


@_command("show-params")
def show_params(params: Path = ParamsOpt, profile: Optional[str] = ProfileOpt, sets: Optional[list[str]] = SetOpt) -> None:
    """Print the resolved parameters (profile and --set applied, paths absolute) as JSON."""
    json.dump(_resolved_params(params, profile, sets).model_dump(mode="json"), sys.stdout, indent=2)
    sys.stdout.write("\n")


@_command("use-profile")
def use_profile(name: str = typer.Argument(..., help="a profile of the params file, or 'default'"), params: Path = ParamsOpt) -> None:
    """Write a profile into the params file: its `profile` key names it and its generated part holds the
    defaults with the profile applied, so `dvc repro` runs it and `dvc exp run -S` varies what it lists."""
    from components.config import document
    from components.config.loading import load_params

    changed = document.use_profile(params, name)
    load_params(params)  # the file as written loads, and runs the profile it names
    out.print(f"{params}: {'now runs' if changed else 'already runs'} profile {name!r} (`dvc repro` runs what it lists)")


if __name__ == "__main__":
    app()
