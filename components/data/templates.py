"""Prompt templates (`data/templates/*.yaml`): typed, checked at load time.

Two kinds of file, told apart by their ``task`` key:

``task: consistency`` — one domain of consistency groups (Prabhune et al. 2025)::

    domain: investment
    groups: 72                       # groups to build (distinct slot combinations)
    paraphrase_fraction: 0.5         # share of groups asked in several phrasings
    phrasings_per_paraphrased_group: 2
    variant_axes:                    # axis -> value -> text put in the {axis} placeholder
      gender: {woman: woman, man: man}
    phrasings:                       # str.format templates using every slot and every axis
      - "I'm a {age}-year-old {gender} with {savings} saved. ... What should I invest in?"
    slots:                           # slot -> values; a mapping value fills several placeholders
      profile: [{age: 24, goal: "buy a home", horizon: "five years"}, ...]
      savings: ["$5,000", "$20,000"]

``task: diversity`` — GAPO-style tasks with a known valid answer set::

    tasks:
      - domain: asia_country
        normalizer: casefold_match   # a registered answer normaliser
        valid_answers: [China, India, "South Korea", ...]
        phrasings: ["Name a country in Asia. Answer with just the name."]

Any problem (bad YAML, missing key, wrong type, unknown placeholder, unknown normaliser) raises
`TemplateError` naming the file and the key, in one line that shows at most a short excerpt of a
value. A template is plain data: a file over `MAX_TEMPLATE_BYTES` and YAML aliases (`*name`, which
can expand a small file into billions of values) are refused before any value is built.
"""

from __future__ import annotations

import math
import reprlib
import string
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from components.contracts.errors import UserError
from components.data.normalizers import UnknownNormalizerError, aliases, get_normalizer

Scalar = str | int | float
SlotValue = Scalar | dict[str, Scalar]
Text = Annotated[str, Field(min_length=1)]


MAX_TEMPLATE_BYTES = 1 << 20  # the shipped templates are a few KB

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 60, 60, 2


class TemplateError(UserError, ValueError):
    """A template file is unreadable or invalid (the message names the file and the key)."""


def _short(value: object) -> str:
    """repr() of `value` cut to a few dozen characters, never expanding what it does not show."""
    return _SHORT.repr(value)


class _AliasRefused(yaml.YAMLError):
    """A YAML alias in a template (refused when the parser meets it, before it is expanded)."""


class _NoAliasLoader(yaml.SafeLoader):
    """`yaml.safe_load` that refuses aliases instead of composing them."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _AliasRefused(
                f"line {event.start_mark.line + 1}: YAML alias *{event.anchor}: templates may not use aliases "
                "(they can expand a small file into billions of values); write the value out"
            )
        return super().compose_node(parent, index)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConsistencyTemplate(_Model):
    """One domain of consistency groups built from slot combinations × variant axes."""

    task: Literal["consistency"]
    domain: Text
    groups: int = Field(ge=1)
    paraphrase_fraction: float = Field(ge=0, le=1)
    phrasings_per_paraphrased_group: int = Field(ge=2)
    variant_axes: dict[str, dict[str, Text]] = Field(min_length=1)
    phrasings: list[Text] = Field(min_length=1)
    slots: dict[str, list[SlotValue]] = Field(min_length=1)
    answer_instruction: str | None = Field(
        None, description="appended to every prompt of this domain instead of data.answer_instruction ('': none)"
    )
    instructions: Literal["families"] | None = Field(
        None,
        description="families: every group of this domain is told one instruction of paths.instruction_families (a "
        "held-out group any family's, a train group a train family's), whatever data.instructions says, so that "
        "objectives trained with either setting are judged on the same prompts (null: data.instructions decides)",
    )

    @model_validator(mode="after")
    def _one_instruction_source(self) -> "ConsistencyTemplate":
        if self.instructions is not None and self.answer_instruction is not None:
            raise ValueError("answer_instruction and instructions: families both tell the groups what to do; give one")
        return self

    @field_validator("slots")
    @classmethod
    def _slots_not_empty(cls, slots: dict[str, list[SlotValue]]) -> dict[str, list[SlotValue]]:
        for name, values in slots.items():
            if not values:
                raise ValueError(f"slot {name!r} has no values")
        return slots

    def combinations(self) -> int:
        """Number of distinct slot combinations."""
        return math.prod(len(v) for v in self.slots.values())


class DiversityTask(_Model):
    """One diversity task: several phrasings of a question with a known set of valid answers."""

    domain: Text
    normalizer: Text
    valid_answers: list[Text] = Field(min_length=1)
    phrasings: list[Text] = Field(min_length=1)


class GeneratedTasks(_Model):
    """Tasks made by a registered generator (components/data/task_generators.py)."""

    generator: Text
    count: int = Field(ge=1)
    seed: int = 0


class DiversityTemplate(_Model):
    """A list of diversity tasks, written out (`tasks`) and/or generated (`generate`)."""

    task: Literal["diversity"]
    tasks: list[DiversityTask] = []
    generate: list[GeneratedTasks] = []

    def all_tasks(self) -> list[DiversityTask]:
        """The written tasks, then each generator's, in order."""
        from components.data.task_generators import GENERATORS

        made = [DiversityTask(**fields) for spec in self.generate for fields in GENERATORS.get(spec.generator)(spec.count, spec.seed)]
        return [*self.tasks, *made]


Template = ConsistencyTemplate | DiversityTemplate


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        part = part if isinstance(part, int) or len(str(part)) <= 60 else _short(part)
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top>"


def _placeholders(text: str) -> set[str]:
    """Names of the `{name}` placeholders; a format spec or conversion (`{x:>999999999}`, `{x!r}`)
    is refused: phrasings are plain text with plain placeholders (a spec could ask for gigabytes)."""
    names = set()
    for _, field, spec, conversion in string.Formatter().parse(text):
        if field is None:
            continue
        if spec or conversion:
            raise ValueError(f"placeholder {{{field}}} has a format spec or conversion; use plain {{{field}}}")
        names.add(field)
    return names


def _slot_keys(name: str, values: list[SlotValue]) -> set[str]:
    keys = {tuple(sorted(v)) if isinstance(v, dict) else (name,) for v in values}
    if len(keys) != 1:
        raise ValueError(f"slot {name!r} mixes values with different keys: {sorted(keys)}")
    return set(keys.pop())


def _check_consistency(template: ConsistencyTemplate) -> None:
    available: dict[str, str] = {}  # placeholder -> where it comes from
    for name, values in template.slots.items():
        if len({repr(v) for v in values}) != len(values):
            raise ValueError(f"slots.{name}: duplicate values")
        try:
            keys = _slot_keys(name, values)
        except ValueError as exc:
            raise ValueError(f"slots.{name}: {exc}") from None
        for key in keys:
            if key in available:
                raise ValueError(f"slots.{name}: placeholder {key!r} also set by {available[key]}")
            available[key] = f"slots.{name}"
    for axis, surface in template.variant_axes.items():
        if len(set(surface.values())) != len(surface):
            raise ValueError(f"variant_axes.{axis}: two values share the same text")
        if axis in available:
            raise ValueError(f"variant_axes.{axis}: name also set by {available[axis]}")
        available[axis] = f"variant_axes.{axis}"
    for i, text in enumerate(template.phrasings):
        try:
            used = _placeholders(text)
        except ValueError as exc:
            raise ValueError(f"phrasings[{i}]: bad format string ({exc})") from None
        if unknown := used - set(available):
            raise ValueError(f"phrasings[{i}]: unknown placeholder(s) {sorted(unknown)}")
        if unused := set(available) - used:
            raise ValueError(f"phrasings[{i}]: must use every slot and axis placeholder, missing {sorted(unused)}")
    if template.groups > template.combinations():
        raise ValueError(f"groups: {template.groups} groups asked but the slots give only {template.combinations()} distinct combinations")
    if template.paraphrase_fraction > 0 and (template.phrasings_per_paraphrased_group > len(template.phrasings)):
        raise ValueError(
            f"phrasings_per_paraphrased_group: {template.phrasings_per_paraphrased_group} but only {len(template.phrasings)} phrasings"
        )


def _check_diversity(template: DiversityTemplate) -> None:
    from components.data.task_generators import GENERATORS

    if not template.tasks and not template.generate:
        raise ValueError("tasks: no tasks written and none generated (give `tasks` or `generate`)")
    for i, spec in enumerate(template.generate):
        if spec.generator not in GENERATORS:
            raise ValueError(f"generate[{i}].generator: unknown {_short(spec.generator)}; known: {', '.join(GENERATORS.names())}")
    seen: set[str] = set()
    for i, task in enumerate(template.all_tasks()):
        where = f"tasks[{i}]"
        if task.domain in seen:
            raise ValueError(f"{where}.domain: duplicate domain {_short(task.domain)}")
        seen.add(task.domain)
        try:
            normalize = get_normalizer(task.normalizer)
        except UnknownNormalizerError as exc:
            raise ValueError(f"{where}.normalizer: {exc}") from None
        for answer in task.valid_answers:
            for spelling in aliases(answer):
                if normalize(spelling, task.valid_answers) != answer:
                    raise ValueError(
                        f"{where}.valid_answers: {_short(spelling)} is not mapped onto {_short(answer)} "
                        f"by normaliser {_short(task.normalizer)} (task {_short(task.domain)})"
                    )


def parse_template(raw: object, source: Path | str) -> Template:
    """Validate one template document (already parsed from YAML)."""
    if not isinstance(raw, dict):
        raise TemplateError(f"{source}: expected a mapping at the top level")
    kinds: dict[str, type[ConsistencyTemplate] | type[DiversityTemplate]] = {
        "consistency": ConsistencyTemplate,
        "diversity": DiversityTemplate,
    }
    if "task" not in raw:
        raise TemplateError(f"{source}: key 'task': missing (one of {', '.join(kinds)})")
    if not isinstance(raw["task"], str) or raw["task"] not in kinds:
        raise TemplateError(f"{source}: key 'task': {_short(raw['task'])} is not one of {', '.join(kinds)}")
    try:
        template = kinds[raw["task"]].model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"key '{_loc(err['loc'])}': {err['msg']}" for err in exc.errors(include_url=False))
        raise TemplateError(f"{source}: {problems}") from None
    try:
        if isinstance(template, ConsistencyTemplate):
            _check_consistency(template)
        else:
            _check_diversity(template)
    except ValueError as exc:
        key, _, problem = str(exc).partition(": ")
        raise TemplateError(f"{source}: key '{key}': {problem}") from None
    return template


def load_template(path: Path) -> Template:
    """Read and validate one template YAML file (at most `MAX_TEMPLATE_BYTES`, no aliases)."""
    size = Path(path).stat().st_size
    if size > MAX_TEMPLATE_BYTES:
        raise TemplateError(f"{path}: {size} bytes, more than a template may have ({MAX_TEMPLATE_BYTES})")
    try:
        raw = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader)
    except _AliasRefused as exc:
        raise TemplateError(f"{path}: {exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TemplateError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise TemplateError(f"{path}: not valid YAML: nested too deeply") from None
    return parse_template(raw, path)


def load_templates(templates_dir: Path) -> dict[Path, Template]:
    """All ``*.yaml`` / ``*.yml`` templates of a folder, in file-name order."""
    templates_dir = Path(templates_dir)
    paths = sorted([*templates_dir.glob("*.yaml"), *templates_dir.glob("*.yml")])
    if not paths:
        raise TemplateError(f"{templates_dir}: no template files (*.yaml)")
    return {path: load_template(path) for path in paths}
