"""Instruction families as data: which verifiable instructions groups are given, and which of them
training may ever see.

A *family* is one checkable instruction type (an IFEval id such as ``length_constraints:number_words``,
or a checker of your own, `register_instruction`), with the settings its instructions take
(``{relation: less than, num_words: 60}``: "Answer with less than 60 words."). A families file
(`data/instructions/families.yaml`) lists them, each with its split:

- ``train``: groups of the train split may be given it, so the reward may teach it;
- ``heldout``: only held-out groups are ever given it, so its compliance measures whether following
  instructions carries over to ones training never saw (the gate `gate.max_heldout_instruction_drop`).

The split is fixed in the file and the file's SHA-256 goes with every groups file built from it, so
what counted as held out is on record. `draw` gives a group one instruction, the same for all its
variants (consistency stays like for like), chosen by a hash of the seed and the group's key: the
same file, seed and group give the same instruction on any machine.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from components.contracts.errors import UserError
from components.contracts.groups import InstructionSpec
from components.contracts.naming import UnknownNameError
from components.instructions.registry import INSTRUCTION_CHECKERS

FamilySplit = Literal["train", "heldout"]
KwargValue = str | int | list[str] | None


class FamiliesFileError(UserError, ValueError):
    """A families file that cannot be used (the message names the file, the family and the rule)."""


class InstructionFamily(BaseModel):
    """One family of a families file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(min_length=1, description="an IFEval instruction id or a registered instruction checker")
    split: FamilySplit
    kwargs: list[dict[str, KwargValue]] = Field(default_factory=lambda: [{}], min_length=1)


class FamiliesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    families: list[InstructionFamily] = Field(min_length=1)


class InstructionFamilies:
    """The families of one file, checked: every id known, every setting accepted by its checker."""

    def __init__(self, families: list[InstructionFamily], sha256: str, source: str = "families"):
        self.families, self.sha256, self.source = families, sha256, source

    def ids(self, split: FamilySplit | None = None) -> list[str]:
        return [f.id for f in self.families if split is None or f.split == split]

    def split_of(self, family: str) -> FamilySplit:
        return next(f.split for f in self.families if f.id == family)

    def options(self, splits: tuple[FamilySplit, ...]) -> list[InstructionSpec]:
        """Every instruction of the families of `splits`, in file order (family, then its settings)."""
        from components.instructions.ifeval import describe

        return [
            InstructionSpec(family=f.id, kwargs=kw, text=describe(f.id, kw)) for f in self.families if f.split in splits for kw in f.kwargs
        ]

    def draw(self, key: str, seed: int, splits: tuple[FamilySplit, ...]) -> InstructionSpec:
        """One instruction of the families of `splits` for the group `key`: family first (each equally
        likely), then one of its settings, by the SHA-256 of (seed, key)."""
        from components.instructions.ifeval import describe

        families = [f for f in self.families if f.split in splits]
        digest = int.from_bytes(hashlib.sha256(f"{seed}\0{key}".encode()).digest()[:8], "big")
        family = families[digest % len(families)]
        kwargs = family.kwargs[(digest // len(families)) % len(family.kwargs)]
        return InstructionSpec(family=family.id, kwargs=kwargs, text=describe(family.id, kwargs))

    def to_record(self) -> dict:
        """What a groups file records of the families it drew from."""
        return {"source": self.source, "sha256": self.sha256, "train": self.ids("train"), "heldout": self.ids("heldout")}


def known_ids() -> list[str]:
    from components.instructions.ifeval import instruction_ids

    return sorted(set(instruction_ids()) | set(INSTRUCTION_CHECKERS.names()))


def load_families(path: Path) -> InstructionFamilies:
    """The families file at `path`, checked (`FamiliesFileError`: file, family, field and rule)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise FamiliesFileError(f"{path}: cannot read the instruction families: {exc}") from exc
    try:
        parsed = FamiliesFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise FamiliesFileError(f"{path}: {where}: {first['msg']}") from None
    seen: set[str] = set()
    known = known_ids()
    for i, family in enumerate(parsed.families):
        if family.id in seen:
            raise FamiliesFileError(f"{path}: families.{i}.id: {family.id!r} is listed twice (one entry a family)")
        seen.add(family.id)
        if family.id not in known:
            raise FamiliesFileError(f"{path}: families.{i}.id: {UnknownNameError('instruction', family.id, known)}")
        for j, kwargs in enumerate(family.kwargs):
            try:
                from components.instructions.ifeval import describe

                describe(family.id, kwargs)
            except (TypeError, ValueError) as exc:
                raise FamiliesFileError(f"{path}: families.{i}.kwargs.{j}: {family.id} does not take {kwargs}: {exc}") from None
    for split in ("train", "heldout"):
        if not any(f.split == split for f in parsed.families):
            raise FamiliesFileError(f"{path}: families: no family has split {split!r} (both are needed)")
    return InstructionFamilies(list(parsed.families), hashlib.sha256(raw).hexdigest(), str(path))


def spec_key(spec: InstructionSpec) -> str:
    """A stable name of one instruction (family and settings), e.g. for tables."""
    return f"{spec.family} {json.dumps(spec.kwargs, sort_keys=True)}"
