"""Reading params.yaml: studies beside it, the profile, migrations, validation with a one-line error, overrides (`-S`) and paths confined to the project."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from components.config.base import ParamsError
from components.config.migrations import TRL_PARAM_ALIASES, migrate_keys
from components.config.operations import PathsConfig
from components.config.params import Params
from components.config.tree import dig, leaves, section_type


def _deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _describe(err: dict) -> str:
    message = str(err["msg"]).removeprefix("Value error, ")
    where = ".".join(str(p) for p in err["loc"])
    if err.get("type") == "extra_forbidden":
        message = f"unknown key{_suggestion(err['loc'])}"
    return f"{where}: {message}" if where else message


def _suggestion(loc: tuple) -> str:
    """ "; did you mean train.lr?": the closest known keys of the section holding `loc` (and TRL's names)."""
    import difflib

    section = section_type(loc[:-1], Params)
    if section is None:
        return ""
    prefix = ".".join(str(k) for k in loc[:-1])
    known = {f"{prefix}.{name}" if prefix else name: name for name in section.model_fields}
    known |= {alias: alias.rsplit(".", 1)[-1] for alias in TRL_PARAM_ALIASES if alias.rsplit(".", 1)[0] == prefix}
    close = difflib.get_close_matches(str(loc[-1]), list(known.values()), n=2, cutoff=0.6)
    names = [path for path, leaf in known.items() if leaf in close]
    return f"; did you mean {' or '.join(names)}?" if names else f"; known: {', '.join(sorted(section.model_fields))}"


STUDIES_DIR = "studies"  # beside the params file: one file per study, studies/<name>.yaml
CONSISTENCY_STUDY = "consistency"  # studies/consistency.yaml is the `study` section


def with_study_files(raw: dict, folder: Path) -> dict:
    """`raw` with every studies/<name>.yaml beside the params file: consistency.yaml as the `study`
    section, any other as `studies.<name>` (one config per experiment, as torchtune's recipes keep
    theirs); a study both in a file and inline in the params file is refused."""
    if not folder.is_dir():
        return raw
    raw = dict(raw)
    for file in sorted(folder.glob("*.yaml")):
        try:
            study = yaml.safe_load(file.read_text()) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ParamsError(f"{file}: not valid YAML: {exc}") from exc
        if not isinstance(study, dict):
            raise ParamsError(f"{file}: must be a YAML mapping (profile, arms, ...), got {type(study).__name__}")
        name = file.stem
        if name == CONSISTENCY_STUDY:
            if raw.get("study") is not None:
                raise ParamsError(f"{file}: the consistency study is also the `study` section of the params file; keep one")
            raw["study"] = study
            continue
        studies = dict(raw.get("studies") or {})
        if name in studies:
            raise ParamsError(f"{file}: study {name!r} is also under `studies` in the params file; keep one")
        studies[name] = study
        raw["studies"] = studies
    return raw


def load_params(path: str | Path = "params.yaml", profile: str | None = None) -> Params:
    """Read `params.yaml`, apply the chosen profile, validate, and resolve relative paths."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: must be a YAML mapping of sections (seed, train, ...), got {type(raw).__name__}")
    raw = with_study_files(raw, path.parent / STUDIES_DIR)
    profiles = raw.pop("profiles", {}) or {}
    if not isinstance(profiles, dict) or any(not isinstance(v, dict) for v in profiles.values()):
        raise ParamsError(f"{path}: profiles must map each profile name to a mapping of overrides")
    raw = migrate_keys(raw, str(path))
    chosen = profile or os.environ.get("GROUPWISE_PROFILE") or raw.get("profile", "default")
    if chosen != "default":
        if chosen not in profiles:
            known = ", ".join(["default", *profiles]) or "default"
            raise ParamsError(f"{path}: unknown profile {chosen!r} (known: {known})")
        profile_raw = migrate_keys(profiles[chosen], f"{path} (profile {chosen!r})")
        merged = _deep_merge(raw, profile_raw)
        _refuse_shadowed(raw, profile_raw, merged, f"{path}", chosen)
        raw = merged
    raw["profile"] = chosen
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ParamsError(f"{path} (profile {chosen!r}): {problems}") from exc
    return _resolve(params, path.parent, path)


def _refuse_shadowed(top: dict, profile: dict, merged: dict, where: str, chosen: str) -> None:
    """A key set both at the top level (to a value other than its default, e.g. by `dvc exp run -S`)
    and by the active profile (to another value) is refused: the profile's value would run while the
    file, and so `dvc exp show`, lists the other. A top-level value equal to the typed default is the
    file restating its defaults, which the profile overrides by design; `-S` overrides both."""
    try:
        shown = Params.model_validate({k: v for k, v in top.items() if k != "profile"}).model_dump(mode="json")
        run = Params.model_validate({k: v for k, v in merged.items() if k != "profile"}).model_dump(mode="json")
    except ValidationError:
        return  # a bad value: validation names it
    defaults = Params().model_dump(mode="json")
    missing = object()
    for leaf in leaves(profile):
        given = top
        for key in leaf:
            given = given.get(key, missing) if isinstance(given, dict) else missing
        if given is missing:
            continue
        value, default, running = dig(shown, leaf), dig(defaults, leaf), dig(run, leaf)
        if value != default and value != running:
            dotted = ".".join(leaf)
            raise ParamsError(
                f"{where}: {dotted} is {value!r} at the top level and {running!r} in the active profile {chosen!r}, whose "
                f"value would run: set it in one place (the profile, or -S {dotted}=... on the command line, which wins over both)"
            )


DATA_DIR = "data"  # every `paths.*` entry must stay inside <root>/data


def _confined_paths(params: Params, root: Path, source: Path) -> dict[str, Path | None]:
    """Resolve `paths.*` against root; refuse any that escapes <root>/data (`..`, absolute, symlink)."""
    data_root = (root / DATA_DIR).resolve()
    paths: dict[str, Path | None] = {}
    for key, value in params.paths:
        if value is None:  # an optional location switched off (paths.base_outputs: null)
            paths[key] = None
            continue
        path = value if value.is_absolute() else root / value
        if not path.resolve().is_relative_to(data_root):
            raise ParamsError(f"{source}: paths.{key} = {str(value)!r} escapes the project's data folder {data_root}")
        paths[key] = path
    return paths


def assignments_to_overrides(assignments: list[str]) -> dict[str, Any]:
    """`["train.rollout.engine=vllm", "train.steps=2"]` -> nested overrides (values parsed as YAML)."""
    import yaml

    out: dict[str, Any] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise ParamsError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. train.rollout.engine=vllm")
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ParamsError(f"--set {item!r}: {part} is set to a value and used as a section")
        try:
            node[leaf] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ParamsError(f"--set {item!r}: the value is not valid YAML ({exc.problem})") from exc
    return out


def with_overrides(params: Params, overrides: dict[str, Any], paths: dict[str, str] | None = None) -> Params:
    """`params` with `overrides` deep-merged over it (validated again) and `paths` (relative to the
    project root, confined to its data folder) replacing some `paths.*` entries."""
    raw = _deep_merge(params.model_dump(mode="json"), migrate_keys(overrides, "overrides"))
    raw["paths"].update(paths or {})
    return _revalidated(raw, params.root, f"overrides {overrides}")


def with_sections(params: Params, sections: dict[str, Any], where: str) -> Params:
    """`params` with whole top-level `sections` replaced (validated again): not merged, so a dict-valued
    field such as `reward.weights` is exactly the given one and a field it lacks takes its default.
    `where` names their source in the error."""
    raw = params.model_dump(mode="json")
    raw.update(copy.deepcopy(sections))
    return _revalidated(raw, params.root, where)


def _revalidated(raw: dict, root: Path, where: str) -> Params:
    """`raw` validated as Params and resolved against `root`; ParamsError naming `where` and every problem."""
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ParamsError(f"{where}: {problems}") from exc
    return _resolve(params, root)


def _resolve(params: Params, root: Path, source: Path | None = None) -> Params:
    paths = _confined_paths(params, root, source or root / "params.yaml")
    tracking = params.tracking.model_copy()
    # not MLFLOW_TRACKING_URI: mlflow.set_tracking_uri() writes that variable, so one project's
    # run would silently redirect every project loaded later in the same process
    uri = os.environ.get("GROUPWISE_TRACKING_URI") or tracking.uri
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix) :].startswith("/"):
        uri = prefix + str(root / uri[len(prefix) :])
    tracking.uri = uri
    if not tracking.artifact_location.is_absolute():
        # like paths.*: a relative location stays inside the project (an absolute one is explicit)
        if not (root / tracking.artifact_location).resolve().is_relative_to(root.resolve()):
            raise ParamsError(
                f"{source or root / 'params.yaml'}: tracking.artifact_location = {str(tracking.artifact_location)!r} "
                f"escapes the project folder {root} (give an absolute path to store artifacts elsewhere)"
            )
        tracking.artifact_location = root / tracking.artifact_location
    return params.model_copy(update={"paths": PathsConfig(**paths), "tracking": tracking, "root": root})
