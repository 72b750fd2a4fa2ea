"""Templates -> `PromptGroup` rows, with a fixed train/held-out split.

Consistency (one template per domain): the builder draws ``groups`` distinct slot combinations
(seeded), and for each renders every phrasing it chose × every combination of variant-axis values.
A share ``paraphrase_fraction`` of the groups gets ``phrasings_per_paraphrased_group`` distinct
phrasings (e.g. 2 phrasings × {woman, man} = 4 members); the others one phrasing (2 members).
Member ids are ``<axis values>-p<phrasing index in the template>``, e.g. ``woman-p1``; group ids
``<domain>-<index>``, e.g. ``investment-0007``.

Diversity: each phrasing of a task is one single-member group ``<domain>-p<phrasing index>``.

Split (`assign_splits`): the unit is a consistency group, or a whole diversity task (all its
phrasings go to the same split, so no held-out question is trained on in other words). Units are
ranked by ``sha256(f"{seed}:{unit}")``; the first ``k = round(fraction * n)`` of each stratum are
held out, with ``1 <= k <= n - 1`` (when n > 1). Strata: each consistency domain
(``DataConfig.heldout_fraction``) and the set of diversity tasks
(``DataConfig.diversity_heldout_fraction``). Everything is a pure function of templates and seed.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from components.config import DataConfig, Params
from components.data.schema import Member, PromptGroup
from components.data.templates import (
    ConsistencyTemplate,
    DiversityTemplate,
    SlotValue,
    TemplateError,
    load_templates,
)
from components.instructions.families import InstructionFamilies, load_families

GROUP_INDEX_WIDTH = 4  # investment-0007


def _slot_fills(name: str, value: SlotValue) -> dict[str, str]:
    if isinstance(value, dict):
        return {key: str(v) for key, v in value.items()}
    return {name: str(value)}


def _combination(template: ConsistencyTemplate, index: int) -> dict[str, str]:
    """The `index`-th slot combination (mixed-radix decoding of the cartesian product)."""
    fills: dict[str, str] = {}
    for name, values in reversed(template.slots.items()):
        index, pick = divmod(index, len(values))
        fills.update(_slot_fills(name, values[pick]))
    return fills


def _variant_id(axis_values: Iterable[str], phrasing: int) -> str:
    return "-".join([*axis_values, f"p{phrasing}"])


def consistency_groups(template: ConsistencyTemplate, seed: int, instruction: str = "") -> list[PromptGroup]:
    """Render one consistency template into groups (split set to 'train'; see `assign_splits`).

    `instruction` (``data.answer_instruction``) is appended, after one space, to every member's
    text alike, so it never differs between the variants of a group.
    """
    suffix = f" {instruction.strip()}" if instruction.strip() else ""
    rng = random.Random(f"{seed}:{template.domain}")
    combos = rng.sample(range(template.combinations()), template.groups)
    n_paraphrased = round(template.paraphrase_fraction * template.groups)
    paraphrased = set(rng.sample(range(template.groups), n_paraphrased))
    axes = {axis: list(values) for axis, values in template.variant_axes.items()}
    groups = []
    for g, combo in enumerate(combos):
        fills = _combination(template, combo)
        n_phrasings = template.phrasings_per_paraphrased_group if g in paraphrased else 1
        phrasings = sorted(rng.sample(range(len(template.phrasings)), n_phrasings))
        members = []
        for p in phrasings:
            for values in itertools.product(*axes.values()):
                attributes = dict(zip(axes, values, strict=True))
                surface = {a: template.variant_axes[a][v] for a, v in attributes.items()}
                members.append(
                    Member(
                        variant_id=_variant_id(values, p),
                        attributes=attributes,
                        text=template.phrasings[p].format(**fills, **surface) + suffix,
                    )
                )
        groups.append(
            PromptGroup(
                group_id=f"{template.domain}-{g:0{GROUP_INDEX_WIDTH}d}",
                domain=template.domain,
                task="consistency",
                split="train",
                members=members,
                variant_axes=axes,
            )
        )
    return groups


def diversity_groups(template: DiversityTemplate) -> list[PromptGroup]:
    """One single-member group per phrasing of each diversity task (split set to 'train')."""
    return [
        PromptGroup(
            group_id=f"{task.domain}-p{p}",
            domain=task.domain,
            task="diversity",
            split="train",
            members=[Member(variant_id=f"p{p}", text=text)],
            valid_answers=list(task.valid_answers),
            answer_normalizer=task.normalizer,
        )
        for task in template.all_tasks()
        for p, text in enumerate(task.phrasings)
    ]


def _rank_key(seed: int, unit: str) -> str:
    return hashlib.sha256(f"{seed}:{unit}".encode()).hexdigest()


def heldout_count(n_units: int, fraction: float) -> int:
    """k = round(fraction * n), kept in [1, n - 1] (or 1 when there is a single unit)."""
    return min(max(1, round(fraction * n_units)), max(1, n_units - 1))


def assign_splits(groups: list[PromptGroup], data_cfg: DataConfig, seed: int) -> list[PromptGroup]:
    """Set each group's split (see the module docstring); order of `groups` is kept."""
    strata: dict[tuple[str, str], set[str]] = defaultdict(set)  # (task, stratum) -> units

    def unit_of(g: PromptGroup) -> tuple[tuple[str, str], str]:
        if g.task == "consistency":
            return (g.task, g.domain), g.group_id
        return (g.task, "*"), g.domain

    for g in groups:
        stratum, unit = unit_of(g)
        strata[stratum].add(unit)
    fractions = {
        "consistency": data_cfg.heldout_fraction,
        "diversity": data_cfg.diversity_heldout_fraction,
    }
    heldout: set[tuple[tuple[str, str], str]] = set()
    for stratum, units in strata.items():
        ranked = sorted(units, key=lambda u: _rank_key(seed, u))
        k = heldout_count(len(ranked), fractions[stratum[0]])
        heldout.update((stratum, u) for u in ranked[:k])
    return [g.model_copy(update={"split": "heldout" if unit_of(g) in heldout else "train"}) for g in groups]


def build_groups(
    templates_dir: Path,
    data_cfg: DataConfig,
    seed: int,
    heldout_dir: Path | None = None,
    families: InstructionFamilies | None = None,
) -> list[PromptGroup]:
    """All groups of all templates in `templates_dir`, split; deterministic given `seed`; then every
    group of the templates in `heldout_dir` (``paths.heldout_templates``), all held out: domains that
    are only ever evaluated, such as a confirmation's data fixed before any model saw it.

    With ``data.instructions: families``, a consistency group of a template without an
    ``answer_instruction`` of its own gets one instruction of `families` (`instruct`) after the split is
    drawn: a train group from the train families, a held-out group from all of them. A template with
    ``instructions: families`` has its groups told so whatever ``data.instructions`` says (a
    confirmation's held-out domains, judged alike under every objective). `families` is needed exactly
    when one of the two asks for it (`needs_families`).

    Order: template files by name, then groups in build order. Raises `TemplateError` on a bad
    template or when two templates produce the same group id.
    """
    owner: dict[str, Path] = {}
    told: set[str] = set()  # groups whose template gives them an instruction of its own
    asked: set[str] = set()  # groups whose template asks for a family's instruction (`instructions: families`)
    groups = assign_splits(_render(Path(templates_dir), data_cfg, seed, owner, told, asked), data_cfg, seed)
    if heldout_dir is not None:
        groups += [g.model_copy(update={"split": "heldout"}) for g in _render(Path(heldout_dir), data_cfg, seed, owner, told, asked)]
    wanted = data_cfg.instructions == "families" or bool(asked)
    if wanted != (families is not None):
        raise ValueError("the instruction families are given exactly when data.instructions or a template's instructions is 'families'")
    if families is not None:
        everyone = data_cfg.instructions == "families"
        groups = [instruct(g, families, seed) if g.group_id in asked or (everyone and g.task == "consistency" and g.group_id not in told) else g
                  for g in groups]  # fmt: skip
    return groups


def groups_from_templates(params: Params) -> list[PromptGroup]:
    """`build_groups` over `params`' template folders and seed, with the instruction families loaded where
    `needs_families` says the templates or ``data.instructions`` ask for them: what the build step makes."""
    wanted = needs_families(params.data, params.paths.templates, params.paths.heldout_templates)
    families = load_families(params.paths.instruction_families) if wanted else None
    return build_groups(params.paths.templates, params.data, params.seed, params.paths.heldout_templates, families)


def needs_families(data_cfg: DataConfig, *template_dirs: Path | None) -> bool:
    """Whether building from `template_dirs` needs the instruction families: ``data.instructions:
    families``, or a consistency template with ``instructions: families``."""
    if data_cfg.instructions == "families":
        return True
    return any(
        isinstance(t, ConsistencyTemplate) and t.instructions == "families"
        for folder in template_dirs
        if folder is not None
        for t in load_templates(Path(folder)).values()
    )


def instruct(group: PromptGroup, families: InstructionFamilies, seed: int) -> PromptGroup:
    """`group` with one instruction of `families` (train families for a train group, any for a held-out
    one) appended, after one space, to every member's text alike, and recorded in `group.instruction`."""
    splits = ("train",) if group.split == "train" else ("train", "heldout")
    spec = families.draw(group.group_id, seed, splits)
    members = [m.model_copy(update={"text": f"{m.text} {spec.text}"}) for m in group.members]
    return group.model_copy(update={"members": members, "instruction": spec})


def _render(
    templates_dir: Path, data_cfg: DataConfig, seed: int, owner: dict[str, Path], told: set[str], asked: set[str]
) -> list[PromptGroup]:
    groups: list[PromptGroup] = []
    for path, template in load_templates(templates_dir).items():
        if isinstance(template, ConsistencyTemplate):
            own = template.answer_instruction
            default = "" if data_cfg.instructions == "families" or template.instructions == "families" else data_cfg.answer_instruction
            built = consistency_groups(template, seed, default if own is None else own)
            if own is not None:
                told.update(g.group_id for g in built)
            if template.instructions == "families":
                asked.update(g.group_id for g in built)
        else:
            built = diversity_groups(template)
        for g in built:
            if g.group_id in owner:
                raise TemplateError(
                    f"{path}: group id {g.group_id!r} also built from {owner[g.group_id]} (domains must be unique across templates)"
                )
            owner[g.group_id] = path
        groups.extend(built)
    return groups


def split_counts(groups: Iterable[PromptGroup]) -> dict[str, dict[str, int]]:
    """{task: {split: number of groups}} — for logging."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for g in groups:
        counts[g.task][g.split] += 1
    return {task: dict(by_split) for task, by_split in counts.items()}


__all__ = [
    "assign_splits",
    "build_groups",
    "consistency_groups",
    "diversity_groups",
    "heldout_count",
    "split_counts",
]
