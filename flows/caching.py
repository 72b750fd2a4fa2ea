"""Prefect cache keys for the cheap deterministic steps, and the guard that keeps them honest.

A cached step is served from Prefect's cache only when
1. its *inputs* are unchanged: the cache key hashes the params sections the step reads, the source
   files it runs and its input data (`STEP_INPUTS`, the same deps as its dvc.yaml stage), and the
   output folder it writes (two projects never share an entry); and
2. its *outputs* are as the last run left them: after each run the flow records a fingerprint of
   the output folders (relative path, size, mtime of every file) in `<root>/.prefect/outputs/`;
   when the folders differ (DVC deletes outs before it runs a stage, a user edits them), the flow
   runs the step with `refresh_cache=True`.
So a cache hit never hands back a result whose files are gone (DVC outs and Prefect's
cache), and unchanged data and base model are not rebuilt.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import components
from components.config import Params
from components.contracts.atomic import atomic_write_text
from components.hashing import tree_files, tree_sha256

PACKAGE = Path(components.__file__).resolve().parent
STAMP_DIR = Path(".prefect") / "outputs"  # under the project root (gitignored)


@dataclass(frozen=True)
class StepInputs:
    sections: tuple[str, ...]  # params.yaml sections the step reads
    sources: tuple[str, ...]  # files/folders of components/ it runs
    data: Callable[[Params], list[Path]]  # input files/folders
    outputs: Callable[[Params], list[Path]]  # folders it writes


def _build_data(p: Params) -> list[Path]:
    """What `build` reads, by content: the templates, a user's own groups file, the decision benchmarks."""
    own = [p.root / p.data.groups_file] if p.data.groups_file is not None else []
    decided = [p.paths.benchmarks] if p.data.decision_groups is not None else []
    return [p.paths.templates, *filter(None, [p.paths.heldout_templates]), *own, *decided]


def _model_data(p: Params) -> list[Path]:
    """What `prepare-model` reads, by content: a local model folder (`model.path`), if any."""
    return [p.root / p.model.path] if p.model.path is not None else []


STEP_INPUTS: dict[str, StepInputs] = {
    "build": StepInputs(("data", "seed"), ("data",), _build_data, lambda p: [p.paths.groups]),
    "prepare-model": StepInputs(("model", "seed"), ("models/provision.py",), _model_data, lambda p: [p.paths.base_model]),
}


def input_key(step: str, params: Params) -> str:
    """Hash of what the step depends on: params sections, source files, input data, output location."""
    spec = STEP_INPUTS[step]
    payload = {
        "step": step,
        "params": params.section_dict(*spec.sections),
        "sources": tree_sha256([PACKAGE / s for s in spec.sources]),
        "data": tree_sha256(spec.data(params)),
        "outputs": [str(p) for p in spec.outputs(params)],
    }
    return f"groupwise-{step}-" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def cache_key_fn(step: str):
    """A Prefect `cache_key_fn` for `step` (the task's `params` argument gives everything)."""

    def key(context, parameters: dict) -> str:
        return input_key(step, parameters["params"])

    return key


def outputs_fingerprint(step: str, params: Params) -> str | None:
    """(relative path, size, mtime) of every output file; None when an output folder is missing."""
    digest = hashlib.sha256()
    for folder in STEP_INPUTS[step].outputs(params):
        files = tree_files(folder)
        if not files:
            return None
        for file in files:
            stat = file.stat()
            digest.update(f"{file.relative_to(folder)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _stamp(step: str, params: Params) -> Path:
    return params.root / STAMP_DIR / f"{step}.json"


def record_outputs(step: str, params: Params) -> None:
    """Remember the input key and output fingerprint the step just left behind."""
    stamp = {"key": input_key(step, params), "outputs": outputs_fingerprint(step, params)}
    atomic_write_text(_stamp(step, params), json.dumps(stamp))


def outputs_intact(step: str, params: Params) -> bool:
    """True when the outputs are exactly as the last run of the step (with these inputs) left them."""
    path = _stamp(step, params)
    try:
        stamp = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    current = outputs_fingerprint(step, params)
    return current is not None and stamp.get("outputs") == current and stamp.get("key") == input_key(step, params)
