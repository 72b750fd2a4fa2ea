"""Data validation with Great Expectations: named rules over the groups JSONL files.

`validate_groups` imports GX lazily, so importing this package stays cheap.
"""

from components.validation.report import (
    GroupValidationError,
    OffendingRow,
    RuleResult,
    ValidationReport,
)
from components.validation.rules import RULES
from components.validation.suite import validate_groups

__all__ = [
    "RULES",
    "GroupValidationError",
    "OffendingRow",
    "RuleResult",
    "ValidationReport",
    "validate_groups",
]
