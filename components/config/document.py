"""params.yaml's defaults, written from the typed config: each default and its description are written
once, in components/config/, and params.yaml shows them.

The part of params.yaml between `BEGIN` and `END` (every section from `seed` to `schedule`) is
`render_defaults()`: each field at its typed default, its `description` beside it (or above it, when
long), a section's docstring above the section. A params file of one's own gets the same defaults
for every key it leaves out; the profiles and the header stay hand-written.

A file whose `profile` key names a profile holds that profile's values in its generated part
(`render_defaults(values)`, written by `groupwise use-profile NAME`): the file's top level wins over its
own profile, so what the file lists, and `dvc exp show` with it, is what runs.

    python -m components.config.document --write params.yaml   # rewrite the generated part in place
    python -m components.config.document --check params.yaml   # exit 1 when it differs

tests/unit/test_config.py fails when params.yaml's generated part is not what the typed config gives.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from components.config.base import ParamsError
from components.config.loading import file_profile, profile_overrides, profile_values
from components.config.markers import BEGIN, BEGIN_LINE, END, PROFILE_BEGIN
from components.contracts.atomic import atomic_write_text
from components.machine import resolve_cpu_matmul, resolve_dtype, resolve_precision

SECTIONS = ("seed", "paths", "data", "model", "lora", "train", "reward", "eval", "gate", "tracking", "registry", "schedule")
COMMENT_COLUMN = 36  # where a description beside its key starts
AUTO = "auto"
WIDTH = 120  # longer lines put the description above the key, wrapped


def _scalar(value: Any) -> str:
    """A value in YAML flow style on one line (`null`, `3.0e-4`, `[q_proj, v_proj]`, `{a: 0.4}`)."""
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, float) and value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
        return f"{value:.1e}".replace("e-0", "e-").replace("e+0", "e+")
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _comment_lines(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, WIDTH - len(indent) - 2, break_on_hyphens=False)]


def _entry(indent: str, key: str, rendered: str, description: str | None) -> list[str]:
    line = f"{indent}{key}:{' ' + rendered if rendered else ''}"
    if not description:
        return [line]
    beside = f"{line.ljust(COMMENT_COLUMN - 1)} # {description}"
    return [beside] if len(beside) <= WIDTH and "\n" not in description else [*_comment_lines(description, indent), line]


def _doc(model: type[BaseModel]) -> str | None:
    """The first paragraph of a section's own docstring (not an inherited one)."""
    doc = model.__dict__.get("__doc__")
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split()) if doc else None


def _fields(value: BaseModel, indent: str, given: dict) -> list[str]:
    lines: list[str] = []
    for name, info in type(value).model_fields.items():
        if info.exclude:
            continue
        lines += _field(name, info, getattr(value, name), indent, given.get(name, {}) if isinstance(given, dict) else {})
    return lines


def _field(name: str, info: FieldInfo, value: Any, indent: str, given: Any = None) -> list[str]:
    """One field's lines; `given` is what a profile set there (a value set there is written as it resolved,
    never as `auto`, which another machine would resolve otherwise)."""
    if (
        info.default == AUTO
        and given in ({}, None)
        and value
        in (
            resolve_dtype(AUTO),
            resolve_precision(AUTO),
            resolve_cpu_matmul(AUTO),
        )
    ):  # resolved for this machine when read: the file says auto
        value = AUTO
    if isinstance(value, BaseModel):
        description = info.description or _doc(type(value))
        return [*_entry(indent, name, "", description), *_fields(value, indent + "  ", given if isinstance(given, dict) else {})]
    return _entry(indent, name, _scalar(value.model_dump(mode="json") if isinstance(value, BaseModel) else _plain(value)), info.description)


def _plain(value: Any) -> Any:
    """Containers of paths and enums as YAML writes them."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def render_defaults(profile: dict | None = None, name: str = "default") -> list[str]:
    """The generated part of params.yaml, markers included: the typed defaults with `profile` (profile
    `name`'s overrides, as params.yaml's `profiles` holds them) applied."""
    from components.config.params import Params

    given = profile or {}
    values = profile_values(given)
    lines = [BEGIN if name == "default" else PROFILE_BEGIN.format(name=name)]
    for name in SECTIONS:
        info = Params.model_fields[name]
        value = getattr(values, name)
        if isinstance(value, BaseModel):
            lines.append("")
            description = info.description or _doc(type(value))
            lines += [*_entry("", name, "", description), *_fields(value, "  ", given.get(name) or {})]
        else:
            lines += _entry("", name, _scalar(_plain(value)), info.description)
    return [*lines, "", END]


PROFILE_KEY = "profile:"  # the line of params.yaml, above the generated part, that names the file's profile


def use_profile(path: Path, name: str) -> bool:
    """Make `path` run profile `name`: its `profile` line names it and its generated part holds the defaults
    with that profile applied (whatever the generated part held before is replaced). True when it changed."""
    before = Path(path).read_text().splitlines()
    lines = list(before)
    first, last = _span(lines, path)
    overrides = profile_overrides(path, name)
    named = [i for i, line in enumerate(lines[:first]) if line.startswith(PROFILE_KEY)]
    if len(named) != 1:
        raise ParamsError(f"{path}: expected one line starting with {PROFILE_KEY!r} above the generated part, found {len(named)}")
    comment = lines[named[0]].partition("#")[2]
    lines[named[0]] = f"{PROFILE_KEY} {name}" + (
        f"{' ' * max(1, COMMENT_COLUMN - len(PROFILE_KEY) - len(name) - 2)}#{comment}" if comment else ""
    )
    new = [*lines[:first], *render_defaults(overrides, name), *lines[last + 1 :]]
    if new == before:
        return False
    atomic_write_text(Path(path), "\n".join(new) + "\n")
    return True


def _span(lines: list[str], path: Path) -> tuple[int, int]:
    try:
        return next(i for i, line in enumerate(lines) if BEGIN_LINE.match(line)), lines.index(END)
    except (StopIteration, ValueError):
        raise ParamsError(
            f"{path}: expected the lines {BEGIN!r} and {END!r} around the generated part (copy them from the project's params.yaml)"
        ) from None


def generated_part(path: Path) -> list[str]:
    lines = Path(path).read_text().splitlines()
    first, last = _span(lines, path)
    return lines[first : last + 1]


def expected_part(path: Path) -> list[str]:
    """What `path`'s generated part should read: the defaults with the file's own profile applied."""
    name = file_profile(path)
    return render_defaults(profile_overrides(path, name), name)


def write(path: Path) -> bool:
    """Rewrite the generated part of `path` in place; True when it changed."""
    lines = Path(path).read_text().splitlines()
    first, last = _span(lines, path)
    new = expected_part(path)
    if lines[first : last + 1] == new:
        return False
    atomic_write_text(Path(path), "\n".join([*lines[:first], *new, *lines[last + 1 :]]) + "\n")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="params.yaml's defaults from the typed config (module docstring).")
    parser.add_argument("params", type=Path, nargs="?", default=Path("params.yaml"))
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the generated part in place")
    action.add_argument("--check", action="store_true", help="exit 1 when the generated part differs")
    args = parser.parse_args(argv)
    if args.write:
        print(f"{args.params}: {'rewrote the defaults' if write(args.params) else 'up to date'}")
        return 0
    if args.check:
        stale = generated_part(args.params) != expected_part(args.params)
        print(f"{args.params}: {'stale (run with --write)' if stale else 'up to date'}")
        return 1 if stale else 0
    print("\n".join(render_defaults()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
