"""The named data-quality rules for groups files, each one or more GX expectations.

A `Check` is one GX expectation (class name + keyword arguments, so this module does not import
GX) on one table of `flatten.GroupTables`, tagged with the rule it belongs to and the column whose
value is shown for an offending row. `checks(data_cfg, special_tokens)` lists them all; `RULES`
describes each rule. GX's native expectation is used wherever one exists: value lengths, regex
patterns, uniqueness, value sets, pair equality; a count column of `flatten` is checked only where
GX has none (counts inside a JSON value, schema problems, checks across rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from components.config import DataConfig
from components.data.io import SPLITS, TASKS
from components.data.normalizers import normalizer_names

Table = Literal["files", "groups", "members"]

MIN_CONSISTENCY_MEMBERS = 2  # a consistency group compares at least two variants
CONTROL_PATTERN = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # Unicode Cc but tab (\x09) and newline (\x0a): flatten.ALLOWED_CONTROL
BLANK_PATTERN = r"^\s*$"  # empty, or spaces only

RULES: dict[str, str] = {
    "file_has_groups": "each groups file exists and holds at least one group",
    "line_is_json_object": "each non-blank line is a JSON object",
    "required_fields_typed": "required fields present with the right JSON type: group_id, domain, "
    "task, split: str; members: list of objects; member variant_id, text: str; optional fields "
    "typed (pydantic against the PromptGroup / Member schema)",
    "no_unknown_fields": "no fields outside the PromptGroup / Member schema, in groups and in members",
    "ids_not_empty": "group_id, domain and variant_id are not empty or blank",
    "no_control_characters": "no control characters (Unicode Cc other than newline and tab) in texts, ids, attributes or valid answers",
    "task_is_known": f"task is one of {list(TASKS)}",
    "task_matches_file": "a group's task matches its file (consistency.jsonl / diversity.jsonl)",
    "split_is_known": f"split is one of {list(SPLITS)}",
    "text_length_within_bounds": "member text (stripped) has min_chars..max_chars characters",
    "group_id_unique": "group_id is unique across all groups files",
    "variant_id_unique_in_group": "(group_id, variant_id) is unique",
    "consistency_has_min_members": f"a consistency group has >= {MIN_CONSISTENCY_MEMBERS} members",
    "consistency_declares_variant_axes": "a consistency group declares at least one variant axis",
    "consistency_covers_variant_axes": "members cover every value of every declared variant axis",
    "consistency_differs_only_on_axes": "a consistency group's members differ only on its declared variant axes: "
    "every member has the same attribute names, and an attribute that is not an axis has one value in the group "
    "(else the gap compares more than the axis)",
    "diversity_has_valid_answers": "a diversity task has a non-empty set of valid answers",
    "diversity_normalizer_registered": "a diversity task names a registered answer normaliser",
    "valid_answers_distinct": "a diversity task lists each valid answer once (aliases split on '|', case and "
    "spaces folded, and as its answer normaliser reads them: integer '07' is '7'): a duplicate counts twice in "
    "the frequency-aware reward",
    "decision_question_not_heldout": "a decision group is in the train split and its question is one of its "
    "benchmark's train questions: the held-out questions, which judge the model, never reach training",
    "instruction_family_not_heldout": "a group's instruction names a family of the instruction families file "
    "(paths.instruction_families), and a train group's is a train family: the held-out families, which judge the "
    "model, never reach training",
    "members_within_max": "a group has at most data.max_variants_per_group members",
    "prompt_tokens_within_max": "a member's text has at most data.max_prompt_tokens tokens (the base model's "
    "tokenizer; checked once the model is prepared)",
    "no_special_tokens": "a member's text holds none of the tokenizer's special tokens (e.g. <|im_start|>)",
    "group_id_in_one_split": "no group_id appears in both splits",
    "prompt_text_in_one_split": "no prompt text appears in both splits (no leakage)",
}


@dataclass(frozen=True)
class Check:
    """One GX expectation belonging to a named rule."""

    rule: str
    table: Table
    expectation: str  # class name in great_expectations.expectations
    kwargs: dict[str, Any]
    shows: str  # column displayed as the offending value
    label: str | None = None  # prefix of the displayed value, e.g. "text: missing"


def _between(
    rule: str,
    table: Table,
    column: str,
    lo: int | None,
    hi: int | None,
    shows: str | None = None,
    label: str | None = None,
) -> Check:
    return Check(
        rule,
        table,
        "ExpectColumnValuesToBeBetween",
        {"column": column, "min_value": lo, "max_value": hi},
        shows=shows or column,
        label=label,
    )


def _not_matching(rule: str, table: Table, column: str, pattern: str, shows: str, label: str) -> Check:
    return Check(rule, table, "ExpectColumnValuesToNotMatchRegex", {"column": column, "regex": pattern}, shows=shows, label=label)


def _none_in_groups_or_members(rule: str, what: str, label: str) -> list[Check]:
    """The rule at both levels of a groups file: column `n_<what>` is 0 on every group row and on
    every member row (the offending values shown from column `<what>`)."""
    return [_between(rule, table, f"n_{what}", 0, 0, shows=what, label=label) for table in ("groups", "members")]


def _in_set(rule: str, table: Table, column: str, values: list[Any], label: str) -> Check:
    return Check(
        rule,
        table,
        "ExpectColumnValuesToBeInSet",
        {"column": column, "value_set": values},
        shows=column,
        label=label,
    )


def checks(data_cfg: DataConfig, special_tokens: tuple[str, ...] = ()) -> list[Check]:
    """Every check of every rule, with bounds from `data_cfg`; `special_tokens`: the tokenizer's (none
    without a tokenizer: the rule is judged when the model is prepared)."""
    special = Check(
        "no_special_tokens",
        "members",
        "ExpectColumnValuesToNotMatchRegexList",
        {"column": "text", "regex_list": [re.escape(t) for t in special_tokens]},
        shows="special_tokens",
        label="special tokens",
    )
    return [
        _between("file_has_groups", "files", "n_groups", 1, None, shows="status"),
        Check(
            "line_is_json_object",
            "groups",
            "ExpectColumnValuesToBeNull",
            {"column": "row_error"},
            shows="row_error",
        ),
        *_none_in_groups_or_members("required_fields_typed", "type_problems", "fields"),
        *_none_in_groups_or_members("no_unknown_fields", "unknown_fields", "unknown"),
        _not_matching("ids_not_empty", "groups", "group_id", BLANK_PATTERN, "empty_ids", "empty"),
        _not_matching("ids_not_empty", "groups", "domain", BLANK_PATTERN, "empty_ids", "empty"),
        _not_matching("ids_not_empty", "members", "variant_id", BLANK_PATTERN, "empty_ids", "empty"),
        _not_matching("no_control_characters", "groups", "strings", CONTROL_PATTERN, "control_chars", "control"),
        _not_matching("no_control_characters", "members", "strings", CONTROL_PATTERN, "control_chars", "control"),
        _between(
            "valid_answers_distinct",
            "groups",
            "diversity_n_duplicate_answers",
            0,
            0,
            shows="diversity_duplicate_answers",
            label="listed twice",
        ),
        _between("members_within_max", "groups", "n_members", None, data_cfg.max_variants_per_group, label="members"),
        _between("prompt_tokens_within_max", "members", "prompt_tokens", None, data_cfg.max_prompt_tokens, label="tokens"),
        *([special] if special_tokens else []),
        _in_set("task_is_known", "groups", "task", list(TASKS), "task"),
        Check(
            "task_matches_file",
            "groups",
            "ExpectColumnPairValuesToBeEqual",
            {"column_A": "known_task", "column_B": "file_task", "ignore_row_if": "either_value_is_missing"},
            shows="task",
            label="task",
        ),
        _in_set("split_is_known", "groups", "split", list(SPLITS), "split"),
        Check(
            "text_length_within_bounds",
            "members",
            "ExpectColumnValueLengthsToBeBetween",
            {"column": "text_stripped", "min_value": data_cfg.min_chars, "max_value": data_cfg.max_chars},
            shows="text_chars",
            label="chars",
        ),
        Check(
            "group_id_unique",
            "groups",
            "ExpectColumnValuesToBeUnique",
            {"column": "group_id"},
            shows="group_id",
            label="duplicate",
        ),
        Check(
            "variant_id_unique_in_group",
            "members",
            "ExpectCompoundColumnsToBeUnique",
            {"column_list": ["group_id", "variant_id"], "ignore_row_if": "any_value_is_missing"},
            shows="variant_id",
            label="duplicate",
        ),
        _between(
            "consistency_has_min_members",
            "groups",
            "consistency_n_members",
            MIN_CONSISTENCY_MEMBERS,
            None,
            label="members",
        ),
        _between(
            "consistency_declares_variant_axes",
            "groups",
            "consistency_n_axes",
            1,
            None,
            label="axes",
        ),
        _between(
            "consistency_covers_variant_axes",
            "groups",
            "consistency_n_missing_axis_values",
            0,
            0,
            shows="consistency_missing_axis_values",
            label="missing",
        ),
        _between(
            "consistency_differs_only_on_axes",
            "groups",
            "consistency_n_undeclared_differences",
            0,
            0,
            shows="consistency_undeclared_differences",
            label="differ on",
        ),
        _between(
            "diversity_has_valid_answers",
            "groups",
            "diversity_n_valid_answers",
            1,
            None,
            label="valid answers",
        ),
        _in_set(
            "diversity_normalizer_registered",
            "groups",
            "diversity_normalizer",
            normalizer_names(),
            "normalizer",
        ),
        Check(
            "decision_question_not_heldout",
            "groups",
            "ExpectColumnValuesToBeNull",
            {"column": "decision_leak"},
            shows="decision_leak",
        ),
        Check(
            "instruction_family_not_heldout",
            "groups",
            "ExpectColumnValuesToBeNull",
            {"column": "instruction_leak"},
            shows="instruction_leak",
        ),
        _between(
            "group_id_in_one_split",
            "groups",
            "n_splits_for_group_id",
            1,
            1,
            shows="splits_for_group_id",
            label="splits",
        ),
        _between(
            "prompt_text_in_one_split",
            "members",
            "n_splits_for_text",
            1,
            1,
            shows="text",
            label="text in both splits",
        ),
    ]
