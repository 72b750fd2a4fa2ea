"""The `PromptGroup` row schema: one JSONL row of `data/groups/*.jsonl` per group.

A contract: data builds groups, validation checks them, GRPO trains on them and evaluation scores
them, so the type lives on the ground floor (`components.data.schema` re-exports it).

A *group* is the unit every GRPO variant in groupwise is relative to:

- ``task="consistency"`` (information-consistent GRPO, Prabhune et al. 2025, arXiv:2512.12858):
  the same question asked in semantically equivalent *variants* that differ on declared axes
  (``variant_axes``, e.g. ``{"gender": ["woman", "man"]}``) and sometimes in phrasing. Rewards
  and advantages are computed over the samples of all variants together.
- ``task="diversity"`` (GAPO, frequency-aware reward): one prompt (a single member) with a known
  set of valid answers ``valid_answers`` and the name of the ``answer_normalizer`` that maps a
  completion onto that set. An entry may list aliases separated by ``|`` (``"autumn|fall"``): they
  count as one answer, and normalisers return the whole entry (`components.data.normalizers`).

Rows are built from `data/templates/*.yaml` by `components.data.builder`, written and read by
`components.data.io`, and checked (without this schema, so that every bad row is reported) by
`components.validation`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TaskKind = Literal["consistency", "diversity"]
Split = Literal["train", "heldout"]


class Member(BaseModel):
    """One prompt variant of a group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant_id: str = Field(min_length=1, description="unique inside the group, e.g. 'woman-p1'")
    attributes: dict[str, str] = Field(
        default_factory=dict, description="value of each variant axis, e.g. {'gender': 'woman'}"
    )
    text: str = Field(min_length=1, description="the user prompt")


class PromptGroup(BaseModel):
    """One group of semantically equivalent prompts (consistency) or one diversity task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str = Field(min_length=1)
    domain: str = Field(min_length=1, description="e.g. 'investment', 'job', 'countries_asia'")
    task: TaskKind
    split: Split
    members: list[Member] = Field(min_length=1)
    variant_axes: dict[str, list[str]] = Field(
        default_factory=dict, description="axis -> values every consistency group must cover"
    )
    valid_answers: list[str] | None = Field(
        default=None, description="diversity: the set of valid (normalised) answers"
    )
    answer_normalizer: str | None = Field(
        default=None, description="diversity: name of a registered answer normaliser"
    )

    @property
    def prompts(self) -> list[str]:
        return [m.text for m in self.members]
