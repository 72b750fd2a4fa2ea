"""The `PromptGroup` row schema: one JSONL row of `data/groups/*.jsonl` per group.

A contract: data builds groups, validation checks them, GRPO trains on them and evaluation scores
them, so the type lives on the ground floor (`components.data.schema` re-exports it).

A *group* is the unit every GRPO variant in groupwise is relative to:

- ``task="consistency"`` (information-consistent GRPO, Prabhune et al. 2025, arXiv:2512.12858):
  the same question asked in semantically equivalent *variants* that differ on declared axes
  (``variant_axes``, e.g. ``{"gender": ["woman", "man"]}``) and sometimes in phrasing, and only
  there (`undeclared_differences`). Rewards and advantages are computed over the samples of all
  variants together.
- ``task="diversity"`` (GAPO, frequency-aware reward): one prompt (a single member) with a known
  set of valid answers ``valid_answers`` and the name of the ``answer_normalizer`` that maps a
  completion onto that set. An entry may list aliases separated by ``|`` (``"autumn|fall"``): they
  count as one answer, and normalisers return the whole entry (`components.data.normalizers`).
- a *decision* group (a consistency group with ``decision`` set): its members are the variants of
  one yes/no question of a decision benchmark (e.g. DiscrimEval: one question, age and race, its
  gender variants). The answer is the next token after ``decision.answer_prefix``; training reads
  the policy's log-odds of a yes word over a no word there (`components.grpo.decisions`).

Rows are built from `data/templates/*.yaml` by `components.data.builder`, written and read by
`components.data.io`, and checked (without this schema, so that every bad row is reported) by
`components.validation`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

TaskKind = Literal["consistency", "diversity"]
Split = Literal["train", "heldout"]


class Member(BaseModel):
    """One prompt variant of a group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant_id: str = Field(min_length=1, description="unique inside the group, e.g. 'woman-p1'")
    attributes: dict[str, str] = Field(default_factory=dict, description="value of each variant axis, e.g. {'gender': 'woman'}")
    text: str = Field(min_length=1, description="the user prompt")


class DecisionSpec(BaseModel):
    """How a decision group's members are answered: the assistant's answer starts with
    `answer_prefix` and its next token is the decision, one of `yes_words` or `no_words`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    benchmark: str = Field(min_length=1, description="the decision benchmark the question comes from")
    question_id: int = Field(ge=0, description="the benchmark's question id (its split is the benchmark's)")
    answer_prefix: str = Field(min_length=1)
    yes_words: list[str] = Field(min_length=1)
    no_words: list[str] = Field(min_length=1)


class InstructionSpec(BaseModel):
    """The checkable instruction every member of a group was given (`components.instructions`): a
    family (an IFEval instruction id or a registered checker), its settings, and its text as the
    members carry it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    family: str = Field(min_length=1, description="IFEval instruction id or registered instruction checker")
    kwargs: dict[str, str | int | list[str] | None] = Field(default_factory=dict, description="the checker's settings")
    text: str = Field(min_length=1, description="the instruction's words, appended to every member's prompt")


class PromptGroup(BaseModel):
    """One group of semantically equivalent prompts (consistency) or one diversity task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_id: str = Field(min_length=1)
    domain: str = Field(min_length=1, description="e.g. 'investment', 'job', 'countries_asia'")
    task: TaskKind
    split: Split
    members: list[Member] = Field(min_length=1)
    variant_axes: dict[str, list[str]] = Field(default_factory=dict, description="axis -> values every consistency group must cover")
    valid_answers: list[str] | None = Field(default=None, description="diversity: the set of valid (normalised) answers")
    answer_normalizer: str | None = Field(default=None, description="diversity: name of a registered answer normaliser")
    decision: DecisionSpec | None = Field(
        default=None, description="consistency: a yes/no decision question, answered in one token after a prefix"
    )

    instruction: InstructionSpec | None = Field(
        default=None, description="consistency: the checkable instruction all members were given (the same for every variant)"
    )

    @model_serializer(mode="wrap")
    def _without_absent_instruction(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A group without an instruction serialises without the key: its row (JSONL, a hash of it, a
        pre-registration's SHA-256) is byte for byte what it was before groups could carry one."""
        data = handler(self)
        if self.instruction is None:
            data.pop("instruction", None)
        return data

    @property
    def prompts(self) -> list[str]:
        return [m.text for m in self.members]


def undeclared_differences(axes: Any, members: Any) -> list[str] | None:
    """How a consistency group's members differ beyond its declared variant axes: an attribute some
    members lack (``age: on 1 of 2 members``) or an undeclared one whose value varies
    (``age: ['30', '70'] (not a declared axis)``); None if not computable. Such a group's gap would
    compare more than its axes. `axes` and `members` as in a groups file's JSON row (members: dicts);
    None also when no axis is declared (a group that is already wrong for that)."""
    if not isinstance(axes, dict) or not axes or not isinstance(members, list):
        return None
    attributes = [m.get("attributes") if isinstance(m, dict) else None for m in members]
    attributes = [a if isinstance(a, dict) else {} for a in attributes]
    differences = []
    for name in sorted({str(k) for a in attributes for k in a}):
        values = [a[name] for a in attributes if name in a]
        if len(values) < len(attributes):
            differences.append(f"{name}: on {len(values)} of {len(attributes)} members")
        elif name not in axes and len({str(v) for v in values}) > 1:
            differences.append(f"{name}: {sorted({str(v) for v in values})} (not a declared axis)")
    return differences
