"""params.yaml's defaults, written from the typed config: each default and its description are written
once, in components/config/, and params.yaml shows them.

The part of params.yaml between `BEGIN` and `END` (every section from `seed` to `schedule`) is
`render_defaults()`: each field at its typed default, its `description` beside it (or above it, when
long), a section's docstring above the section. A params file of one's own gets the same defaults
for every key it leaves out; the profiles, the `profile` choice and the header stay hand-written.

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

from components.contracts.atomic import atomic_write_text
from components.machine import resolve_dtype, resolve_precision

BEGIN = "# ---- defaults: generated from components/config/ by `python -m components.config.document --write params.yaml` ----"
END = "# ---- end of the generated defaults ----"
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


def _fields(value: BaseModel, indent: str) -> list[str]:
    lines: list[str] = []
    for name, info in type(value).model_fields.items():
        if info.exclude:
            continue
        lines += _field(name, info, getattr(value, name), indent)
    return lines


def _field(name: str, info: FieldInfo, value: Any, indent: str) -> list[str]:
    if info.default == AUTO and value in (
        resolve_dtype(AUTO),
        resolve_precision(AUTO),
    ):  # resolved for this machine when read: the file says auto
        value = AUTO
    if isinstance(value, BaseModel):
        description = info.description or _doc(type(value))
        return [*_entry(indent, name, "", description), *_fields(value, indent + "  ")]
    return _entry(indent, name, _scalar(value.model_dump(mode="json") if isinstance(value, BaseModel) else _plain(value)), info.description)


def _plain(value: Any) -> Any:
    """Containers of paths and enums as YAML writes them."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


def render_defaults() -> list[str]:
    """The generated part of params.yaml, markers included."""
    from components.config.params import Params

    defaults = Params()
    lines = [BEGIN]
    for name in SECTIONS:
        info = Params.model_fields[name]
        value = getattr(defaults, name)
        if isinstance(value, BaseModel):
            lines.append("")
            description = info.description or _doc(type(value))
            lines += [*_entry("", name, "", description), *_fields(value, "  ")]
        else:
            lines += _entry("", name, _scalar(_plain(value)), info.description)
    return [*lines, "", END]


def _span(lines: list[str], path: Path) -> tuple[int, int]:
    try:
        return lines.index(BEGIN), lines.index(END)
    except ValueError:
        raise ValueError(f"{path}: expected the lines {BEGIN!r} and {END!r}") from None


def generated_part(path: Path) -> list[str]:
    lines = Path(path).read_text().splitlines()
    first, last = _span(lines, path)
    return lines[first : last + 1]


def write(path: Path) -> bool:
    """Rewrite the generated part of `path` in place; True when it changed."""
    lines = Path(path).read_text().splitlines()
    first, last = _span(lines, path)
    new = render_defaults()
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
        stale = generated_part(args.params) != render_defaults()
        print(f"{args.params}: {'stale (run with --write)' if stale else 'up to date'}")
        return 1 if stale else 0
    print("\n".join(render_defaults()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
