"""Reading params.yaml: studies beside it, the profile, migrations, validation with a one-line error, overrides (`-S`) and paths confined to the project."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from components.config.base import ParamsError
from components.config.markers import written_profile
from components.config.migrations import TRL_PARAM_ALIASES, migrate_keys
from components.config.operations import PathsConfig
from components.config.params import Params
from components.config.tree import dig, leaves, section_type


def read_yaml(text: str) -> Any:
    """YAML as `yaml.safe_load` reads it, parsed by libyaml where PyYAML has it (the same resolver; ~20x
    faster on params.yaml and its studies, which every command reads)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _deep_merge(base: dict, override: dict) -> dict:
    """`override` over `base`, dicts merged key by key, anything else replaced. Not OmegaConf.merge: it
    reads `${...}` in a value (a prompt, an instruction) as an interpolation and types a section by its
    first value, so a null section could not take a mapping."""
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
            study = read_yaml(file.read_text()) or {}
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
    """Read `params.yaml`, apply the profiles, validate, and resolve relative paths.

    The layers, each over the one before: the typed defaults; the profile the file's `profile` key names;
    the file's top level. The file's top level wins over its own profile, so every value the file lists,
    and so every value `dvc exp run -S` writes and `dvc exp show` lists, is the value that runs. A profile
    asked for by `profile` or GROUPWISE_PROFILE that is not the file's own takes its place: the typed
    defaults, then what the file changes of its own profile (a `-S` edit, a key of one's own), then the
    asked profile (a run DVC does not record; refused inside a DVC stage)."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found")
    try:
        text = path.read_text()
        raw = read_yaml(text) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: must be a YAML mapping of sections (seed, train, ...), got {type(raw).__name__}")
    raw = with_study_files(raw, path.parent / STUDIES_DIR)
    profiles = raw.pop("profiles", {}) or {}
    if not isinstance(profiles, dict) or any(not isinstance(v, dict) for v in profiles.values()):
        raise ParamsError(f"{path}: profiles must map each profile name to a mapping of overrides")
    raw = migrate_keys(raw, str(path))
    own = str(raw.pop("profile", None) or "default")
    asked = profile or os.environ.get("GROUPWISE_PROFILE") or own
    if asked == own:
        _refuse_mislabelled(text, path, own)
        raw = _deep_merge(_profile_overrides(profiles, own, path), raw)
    else:  # in place of the file's own profile: over what the file changes of it
        _refuse_in_dvc_stage(path, asked)
        edited = _deep_merge(_typed_defaults(), _edits(raw, _profile_overrides(profiles, own, path), path))
        raw = _deep_merge(edited, _profile_overrides(profiles, asked, path))
    raw["profile"] = asked
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ParamsError(f"{path} (profile {asked!r}): {problems}") from exc
    return _resolve(params, path.parent, path)


def file_profile(path: str | Path) -> str:
    """The profile a params file names with its own `profile` key ('default' when none)."""
    raw = read_yaml(Path(path).read_text()) or {}
    return str(raw.get("profile") or "default") if isinstance(raw, dict) else "default"


def profile_overrides(path: str | Path, name: str) -> dict:
    """Profile `name` of the params file at `path`, as overrides with old keys migrated ({} for 'default')."""
    raw = read_yaml(Path(path).read_text()) or {}
    profiles = (raw.get("profiles") or {}) if isinstance(raw, dict) else {}
    return _profile_overrides(profiles, name, Path(path))


def _profile_overrides(profiles: dict, name: str, path: Path) -> dict:
    if name != "default" and name not in profiles:
        raise ParamsError(f"{path}: unknown profile {name!r} (known: {', '.join(['default', *profiles])})")
    return migrate_keys(profiles.get(name, {}), f"{path} (profile {name!r})")


def _typed_defaults() -> dict:
    """Every section at its typed default, as a params file listing them all holds them."""
    return Params().model_dump(mode="json", exclude={"profile", "study", "studies"})


def profile_values(profile: dict) -> Params:
    """The typed defaults with `profile` deep-merged over them, as a file listing every default gets them
    (a dict-valued field such as reward.weights keeps the default entries the profile does not name)."""
    return Params.model_validate(_deep_merge(_typed_defaults(), profile))


def _edits(top: dict, own: dict, path: Path) -> dict:
    """The values of the file's top level that differ from what its own profile gives them (the typed
    defaults with `own` applied), as nested overrides; validation names a bad value."""
    try:
        listed = Params.model_validate(_deep_merge(own, {k: v for k, v in top.items() if k != "profile"})).model_dump(mode="json")
    except ValidationError as exc:
        problems = "; ".join(_describe(err) for err in exc.errors())
        raise ParamsError(f"{path}: {problems}") from exc
    written = profile_values(own).model_dump(mode="json")
    edits: dict = {}
    for leaf in leaves(listed):
        if dig(listed, leaf) != dig(written, leaf) and leaf[0] not in ("profile", "study", "studies"):
            node = edits
            for key in leaf[:-1]:
                node = node.setdefault(key, {})
            node[leaf[-1]] = dig(listed, leaf)
    for section in ("study", "studies"):  # a study's config is the file's, whichever profile runs
        if section in top:
            edits[section] = top[section]
    return edits


def _refuse_mislabelled(text: str, path: Path, name: str) -> None:
    """A file whose generated part holds another profile's values than the one its `profile` key names is
    refused: the `profile` line was changed by hand or by `dvc exp run -S profile=...`, and the listed values,
    which win over the file's own profile, would run, not the profile the file names."""
    written = written_profile(text)
    if written is not None and written != name:
        raise ParamsError(
            f"{path}: profile {name!r} is named but the generated part holds the values of profile {written!r}, which "
            f"would run: write the profile in with `groupwise use-profile {name}`, or apply it to one run with --profile {name}"
        )


def _refuse_in_dvc_stage(path: Path, name: str) -> None:
    """Inside a DVC stage (DVC sets DVC_STAGE) a profile from the command line or GROUPWISE_PROFILE is
    refused: dvc.lock records the params file's values, which would not be the ones that ran."""
    stage = os.environ.get("DVC_STAGE")
    if stage:
        raise ParamsError(
            f"{path}: profile {name!r} asked for inside DVC stage {stage!r} (--profile or GROUPWISE_PROFILE), whose record "
            f"lists the params file's values: write the profile into the file with `groupwise use-profile {name}`"
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
    """`["train.rollout.engine=vllm", "train.steps=2"]` -> nested overrides, read by Hydra's override
    parser: the grammar `dvc exp run -S` reads, so one assignment means the same to both
    (`train.lr=5e-5`, `eval.fairness.ages=[60,80]`, `schedule.cron='0 3 * * 1'`, `data.groups_file=null`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out: dict[str, Any] = {}
    for item in assignments:
        key = item.partition("=")[0].strip().lstrip("+")
        if "=" not in item or not key or any(not part for part in key.split(".")):
            raise ParamsError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. train.rollout.engine=vllm")
        try:
            (override,) = parser.parse_overrides([item])
        except HydraException as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ParamsError(f"--set {item!r}: not a value `dvc exp run -S` reads ({problem})") from exc
        if override.is_delete() or override.is_sweep_override():
            raise ParamsError(f"--set {item!r}: expected one value for one run (no ~deletion, no sweep)")
        node = out
        *parents, leaf = override.key_or_group.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ParamsError(f"--set {item!r}: {part} is set to a value and used as a section")
        node[leaf] = override.value()
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
