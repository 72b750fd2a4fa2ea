"""Walking nested params: the typed section at a path, a value at a path, pruning emptied dicts, the leaves."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel


def section_type(path: tuple, root: type[BaseModel]) -> type[BaseModel] | None:
    """The typed section (a `_Section` class) at `path` of `root` (`Params`; `Optional` unwrapped); None where
    the path leaves the sections (an unknown key, a plain value, a dict such as reward.weights)."""
    section: type[BaseModel] | None = root
    for key in path:
        field = section.model_fields.get(str(key)) if section is not None else None
        if field is None:
            return None
        candidates = (field.annotation, *get_args(field.annotation))
        section = next((a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return section


def dig(tree: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree.get(key, {}) if isinstance(tree, dict) else {}
    return tree


def prune(tree: dict, path: tuple[str, ...]) -> None:
    """Drop the dicts along `path` that a pop left empty, innermost first."""
    for depth in range(len(path), 0, -1):
        parent = dig(tree, path[: depth - 1]) if depth > 1 else tree
        if parent.get(path[depth - 1]) == {}:
            parent.pop(path[depth - 1])


def leaves(tree: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for key, value in tree.items():
        out += leaves(value, (*prefix, key)) if isinstance(value, dict) and value else [(*prefix, key)]
    return out
