"""Which groups a step uses: `train.tasks` / `train.domains` and `eval.domains` select by name.

A domain entry is a name or a shell-style pattern (`fnmatch`, case-sensitive): `job` selects the
job groups, `list-*` every generated list-selection task (their domains are `list-<pool>-<i>`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from components.config import ParamsError, TrainConfig
from components.contracts.groups import PromptGroup


def in_domains(domain: str, patterns: Sequence[str] | None) -> bool:
    """True when `patterns` is None (all domains) or `domain` matches one of them."""
    return patterns is None or any(fnmatchcase(domain, pattern) for pattern in patterns)


def select_groups(
    groups: Iterable[PromptGroup], tasks: Sequence[str], domains: Sequence[str] | None, field: str = "domains"
) -> list[PromptGroup]:
    """The groups of `tasks` whose domain `in_domains(domains)`, in their order. A pattern that
    matches none of those groups' domains is a ParamsError naming `field` (a misspelt domain would
    otherwise narrow the selection without a word)."""
    of_tasks = [g for g in groups if g.task in tasks]
    present = sorted({g.domain for g in of_tasks})
    unmatched = [p for p in domains or () if not any(in_domains(d, [p]) for d in present)]
    if unmatched and of_tasks:
        raise ParamsError(f"{field}: {unmatched} match no domain of the {'/'.join(tasks)} groups; their domains: {present}")
    return [g for g in of_tasks if in_domains(g.domain, domains)]


def training_groups(groups_dir: Path, train: TrainConfig) -> list[PromptGroup]:
    """The groups `train` trains on: the train split of `groups_dir`, of `train.tasks` and `train.domains`."""
    from components.data.io import load_groups

    return select_groups(load_groups(groups_dir, split="train"), train.tasks, train.domains, "train.domains")


__all__ = ["in_domains", "select_groups", "training_groups"]
