"""The one fingerprint of saved work (a resumable training state, a finished study arm)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from components.config import migrations
from components.config.tree import dig, prune, section_type

# an engine's section of knobs -> (the field that picks the engine, the engine's name): counted only where it runs
ENGINE_KNOBS: dict[tuple[str, ...], tuple[tuple[str, ...], str]] = {
    ("train", "rollout", "vllm"): (("train", "rollout", "engine"), "vllm"),
    ("eval", "vllm"): (("eval", "engine"), "vllm"),
}


def _without_defaults(root: type[BaseModel], path: tuple[str, ...], value: Any) -> Any:
    """`value` of the section at `path` (formerly null by default) as `exclude_defaults` dumps a set
    section: only its fields that differ from the section type's own defaults."""
    section = section_type(path, root)
    if not isinstance(value, dict) or section is None:
        return value
    defaults = section().model_dump(mode="json")
    return {key: item for key, item in value.items() if defaults.get(key, object()) != item}


# knobs that say how or where a run executes, not what it computes: no fingerprint counts them
# (the embedding batch size changes the semantic metrics' embeddings only at float rounding)
OPERATIONAL: dict[str, tuple[str, ...]] = {
    "train": ("save_every", "log_rollouts_every", "snapshot_every", "merge_lora_for_rollouts", "device"),
    "eval": ("embedding_batch_size",),
}


def fingerprint(params: BaseModel, sections: Iterable[str], **depends_on: Any) -> str:
    """`Params.fingerprint`: the first 16 hex digits of the SHA-256 of `sections` of `params` (fields
    at their default, `OPERATIONAL` knobs and the knobs of an engine not in use left out; a changed
    default counted against its former value, `migrations.FORMER_DEFAULTS`) and `depends_on`."""
    payload = params.model_dump(mode="json", include=set(sections), exclude_defaults=True)
    full = params.model_dump(mode="json", include=set(sections))
    for tree in (payload, full):  # a reward added to the defaults, switched off: as if never named
        weights = dig(tree, ("reward", "weights"))
        for name in migrations.ADDED_DEFAULT_REWARDS:
            if isinstance(weights, dict) and weights.get(name) == 0:
                weights.pop(name)
    for path, former in migrations.FORMER_DEFAULTS.items():  # a changed default: left out at its former value, not its new one
        if path[0] not in full:
            continue
        value, inner = dig(full, path), payload.setdefault(path[0], {})
        for key in path[1:-1]:
            inner = inner.setdefault(key, {})
        if value == former:
            inner.pop(path[-1], None)
        else:
            inner[path[-1]] = _without_defaults(type(params), path, value) if former is None else value
        prune(payload, path[:-1])
    for knobs, (engine, name) in ENGINE_KNOBS.items():  # an engine that does not run computes nothing
        if knobs[0] in full and dig(full, engine) != name:
            dig(payload, knobs[:-1]).pop(knobs[-1], None)
            prune(payload, knobs[:-1])
    for section, fields in OPERATIONAL.items():
        for name in fields:
            payload.get(section, {}).pop(name, None)
        if payload.get(section) == {}:  # only operational knobs were set: as if none was
            payload.pop(section)
    text = json.dumps({"params": payload, **depends_on}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
