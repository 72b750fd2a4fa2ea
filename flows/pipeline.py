"""The pipeline's one definition is `dvc.yaml`: its stages, their order, deps, params and outs are
declared there once, and both runners execute it.

- `dvc repro` / `dvc exp run` run each stage's command, `groupwise <step>`.
- The Prefect flow `retrain` (the CLI, the schedule, a deployment run) runs the same stages in DVC's
  dependency order, one task each: the stage's step (`flows.steps.STEPS[step]`, the function its
  command calls) in the flow's process, then `dvc commit` of the stage, so that dvc.lock records its
  deps, params and outs and DVC's cache holds its cached outs. After a retrain `dvc status` is clean
  for every stage that ran and `dvc push` sends the groups, the base model and the checkpoint.

The flow runs every stage each time (a retrain retrains; each step reuses what it may by content:
prepare-model keeps a base model whose weights have their recorded SHA-256, prepare-benchmarks keeps
files with their pinned hashes), so no input is served from a cache keyed on a path or written by
hand. Under `dvc repro` DVC's hashes decide, so every file a stage reads must be one of its deps: a
user's groups file (`data.groups_file`, a path in params) among build's, the instruction families
(`paths.instruction_families`) among build's and validate's, which the flow checks (`check_declared`)
before it runs anything.

DVC can vouch only for what params.yaml says. A run whose params differ from params.yaml's (a
`--profile` or `-S` on the command line, a deployment's overrides) is not recorded in DVC, and says
so in one line: `dvc exp run -S key=value` runs and records such a run. A folder that is not a DVC
project (no `.dvc/`) runs every stage and records nothing in DVC.

A scheduled or triggered run in a git checkout is saved as a DVC experiment
(`dvc exp save`, named `retrain-<flow run name>`): `dvc exp show` lists it with its params and
metrics, `dvc exp apply <name>` then `dvc checkout` restores its files, `dvc exp push origin <name>`
shares it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import chdir, contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from components.code_version import CODE_ROOT
from components.config import Params
from components.contracts.errors import UserError

DEFINITION = "dvc.yaml"
COMMAND = "groupwise "


class PipelineError(UserError, ValueError):
    """dvc.yaml does not declare a pipeline the flow can run (the message names the file and stage)."""


@dataclass(frozen=True)
class Stage:
    name: str  # the stage in dvc.yaml
    step: str  # the `groupwise <step>` its command runs (a key of flows.steps.STEPS)
    deps: tuple[str, ...]
    outs: tuple[str, ...]


def _paths(entries) -> tuple[str, ...]:
    return tuple(next(iter(e)) if isinstance(e, dict) else str(e) for e in entries or [])


def _within(a: str, b: str) -> bool:
    """Whether path `a` is `b` or inside it, or `b` inside `a` (a dep on a file of an out folder)."""
    pa, pb = Path(a).parts, Path(b).parts
    return pa[: len(pb)] == pb or pb[: len(pa)] == pa


def definition_path(root: Path) -> Path:
    """The project's dvc.yaml, else the one beside groupwise's code (a params folder of one's own)."""
    own = Path(root) / DEFINITION
    return own if own.is_file() else CODE_ROOT / DEFINITION


def stages(root: Path) -> list[Stage]:
    """dvc.yaml's stages in dependency order (a stage after every stage whose outs it depends on; ties
    in the file's order: networkx's lexicographical topological sort, the library DVC's graph uses)."""
    import networkx as nx

    path = definition_path(root)
    declared = (yaml.safe_load(path.read_text()) or {}).get("stages") or {}
    found = []
    for name, body in declared.items():
        cmd = str(body.get("cmd", ""))
        if not cmd.startswith(COMMAND) or len(cmd.split()) != 2:
            raise PipelineError(f"{path}: stage {name!r}: cmd must be `groupwise <step>` to run under Prefect too, got {cmd!r}")
        found.append(Stage(name, cmd.split()[1], _paths(body.get("deps")), _paths(body.get("outs")) + _paths(body.get("metrics"))))
    order = {stage.name: i for i, stage in enumerate(found)}
    graph = nx.DiGraph()
    graph.add_nodes_from(order)
    for before in found:
        for after in found:
            if before is not after and any(_within(d, o) for d in after.deps for o in before.outs):
                graph.add_edge(before.name, after.name)
    try:
        ordered = list(nx.lexicographical_topological_sort(graph, key=order.__getitem__))
    except nx.NetworkXUnfeasible:
        raise PipelineError(f"{path}: the stages' deps and outs form a cycle") from None
    by_name = {stage.name: stage for stage in found}
    return [by_name[name] for name in ordered]


# params that name a file of the user's, and the steps that read it: each must be a dep of their stages
USER_FILES: dict[str, tuple[str, ...]] = {
    "data.groups_file": ("build",),
    "paths.instruction_families": ("build", "validate"),
}


def user_files(params: Params) -> dict[str, Path | None]:
    """The files of `USER_FILES` as these params name them (None: not used)."""
    return {key: functools.reduce(getattr, key.split("."), params) for key in USER_FILES}


def check_declared(root: Path, files: dict[str, Path | None]) -> None:
    """Each file of one's own (`USER_FILES`: a groups file, the instruction families) must be a dep of
    every stage that reads it, or `dvc repro` would not rerun it when the file changes (and dvc.lock
    would not record it): PipelineError naming dvc.yaml, the stage and the file otherwise."""
    path = definition_path(root)
    by_step = {stage.step: stage for stage in stages(root)}
    for key, file in files.items():
        if file is None:
            continue
        try:
            relative = Path(file).resolve().relative_to(Path(root).resolve()) if Path(file).is_absolute() else Path(file)
        except ValueError:
            raise PipelineError(
                f"{path}: {key} {str(file)!r} is outside the project {root}: DVC tracks only files inside it; copy it in "
                "and list it under the deps of the stages that read it"
            ) from None
        for step in USER_FILES[key]:
            stage = by_step.get(step)
            if stage is not None and not any(relative.is_relative_to(dep) for dep in stage.deps):
                raise PipelineError(
                    f"{path}: the {stage.name} stage does not list {key} {str(relative)!r} under its deps; add `- {relative}` "
                    "there, so that DVC reruns the stage when the file changes"
                )


class DvcRecordError(UserError, RuntimeError):
    """DVC could not record a stage that ran (its outputs are on disk; the message says what DVC said)."""


class DvcRecord:
    """The DVC project at `root`, as the flow records into it: commit a stage, save the workspace as
    an experiment. One `dvc.repo.Repo` for the whole flow run."""

    def __init__(self, repo) -> None:
        self.repo = repo
        self.root = Path(repo.root_dir)

    def _target(self, stage: str) -> str:
        return f"{self.root / DEFINITION}:{stage}"  # absolute: DVC resolves a bare stage name against the cwd

    def commit(self, stage: str) -> None:
        """`dvc commit -f <stage>`: dvc.lock takes the stage's deps, params and outs, DVC's cache its cached outs."""
        from dvc.exceptions import DvcException

        try:
            with chdir(self.root):
                self.repo.commit(self._target(stage), force=True)
        except DvcException as exc:
            raise DvcRecordError(f"{self.root / DEFINITION}: stage {stage!r} ran but DVC could not record it: {exc}") from exc

    def save_experiment(self, name: str) -> str:
        """`dvc exp save -n <name> -f`: the workspace as an experiment; what became of it, in words."""
        from dvc.scm import NoSCM

        if isinstance(self.repo.scm, NoSCM) or self.repo.scm.no_commits:
            return "not saved as an experiment (no git commit to save it against)"
        try:
            with chdir(self.root):
                self.repo.experiments.save(name=name, force=True)
        except (
            Exception
        ) as exc:  # DVC's or git's (scmrepo) errors: the run and its record in dvc.lock stand, only the experiment is missing
            return f"not saved as an experiment: {type(exc).__name__}: {exc}"
        return f"saved as DVC experiment {name} (`dvc exp show`)"


@contextmanager
def dvc_record(root: Path) -> Iterator[tuple[DvcRecord | None, str]]:
    """(the project's `DvcRecord`, "") or (None, why not): `root` is not a DVC project (no `.dvc/`),
    or DVC cannot open it (a DVC project set up for git outside a git checkout)."""
    if not (Path(root) / ".dvc").is_dir():
        yield None, f"{root} is not a DVC project (no .dvc/)"
        return
    from dvc.exceptions import DvcException
    from dvc.repo import Repo
    from dvc.scm import SCMError

    try:
        repo = Repo(str(root))
    except (DvcException, SCMError) as exc:
        yield None, f"DVC cannot open {root}: {exc}"
        return
    try:
        yield DvcRecord(repo), ""
    finally:
        repo.close()
