"""Small consistency groups and tiny-model training params shared by the GRPO tests and workers."""

from __future__ import annotations

from components.config import Params
from components.data.schema import Member, PromptGroup


def consistency_groups(n: int) -> list[PromptGroup]:
    """n investment questions, each asked as a woman and as a man."""
    return [
        PromptGroup(
            group_id=f"g{i}",
            domain="investment",
            task="consistency",
            split="train",
            variant_axes={"gender": ["woman", "man"]},
            members=[
                Member(variant_id=g, attributes={"gender": g}, text=f"I am a {g} aged {30 + i}. What should I invest in?")
                for g in ("woman", "man")
            ],
        )
        for i in range(n)
    ]


def tiny_params(**train) -> Params:
    """Default params with a short, fast training section (overridable per key)."""
    p = Params()
    settings = {"steps": 2, "groups_per_step": 2, "samples_per_prompt": 3, "max_new_tokens": 8, "lr": 1e-2, **train}
    return p.model_copy(update={"train": p.train.model_copy(update=settings)})
