"""Prompt groups: templates -> `PromptGroup` rows (with split) -> JSONL files; answer normalisers.

Public API: `build_groups`, `write_groups`, `read_groups`, `load_groups`, `get_normalizer`.
"""

from components.data.builder import assign_splits, build_groups, split_counts
from components.data.io import GroupFileError, groups_file, load_groups, read_groups, write_groups
from components.data.normalizers import (
    UnknownNormalizerError,
    get_normalizer,
    normalize_answer,
    normalizer_names,
    register_normalizer,
)
from components.data.schema import Member, PromptGroup
from components.data.templates import TemplateError

__all__ = [
    "GroupFileError",
    "Member",
    "PromptGroup",
    "TemplateError",
    "UnknownNormalizerError",
    "assign_splits",
    "build_groups",
    "get_normalizer",
    "groups_file",
    "load_groups",
    "normalize_answer",
    "normalizer_names",
    "read_groups",
    "register_normalizer",
    "split_counts",
    "write_groups",
]
