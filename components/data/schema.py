"""The `PromptGroup` row schema (defined in `components.contracts.groups`, the seam every package shares)."""

from components.contracts.groups import Member, PromptGroup, Split, TaskKind

__all__ = ["Member", "PromptGroup", "Split", "TaskKind"]
