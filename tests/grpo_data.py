"""Small prompt groups and tiny-model training params shared by the tests and workers."""

from __future__ import annotations

from collections.abc import Callable

from components.config import DecisionPairingConfig, Params
from components.contracts.groups import DecisionSpec
from components.data.schema import Member, PromptGroup

GENDERS = ("woman", "man")


def gender_group(group_id: str, text: Callable[[str], str], domain: str = "investment", split: str = "train",
                 variant_id: Callable[[str], str] = str) -> PromptGroup:  # fmt: skip
    """A consistency group on the gender axis: the member of gender g asks `text(g)`."""
    return PromptGroup(
        group_id=group_id, domain=domain, task="consistency", split=split, variant_axes={"gender": list(GENDERS)},
        members=[Member(variant_id=variant_id(g), attributes={"gender": g}, text=text(g)) for g in GENDERS],
    )  # fmt: skip


def diversity_group(group_id: str, question: str, valid_answers: list[str], domain: str, split: str = "train",
                    normalizer: str = "casefold_match", variant_id: str = "p0") -> PromptGroup:  # fmt: skip
    """A diversity task: one phrasing of `question`, whose answers are `valid_answers`."""
    return PromptGroup(
        group_id=group_id, domain=domain, task="diversity", split=split, members=[Member(variant_id=variant_id, text=question)],
        valid_answers=valid_answers, answer_normalizer=normalizer,
    )  # fmt: skip


def colour_group(*valid_answers: str) -> PromptGroup:
    """ "Name a colour" with `valid_answers` as its valid set (the GAPO and SEED-GRPO tests' task)."""
    return diversity_group("colour", "Name a colour. Answer with just the name.", list(valid_answers), domain="colour")


def consistency_groups(n: int) -> list[PromptGroup]:
    """n investment questions, each asked as a woman and as a man."""
    return [gender_group(f"g{i}", lambda g, i=i: f"I am a {g} aged {30 + i}. What should I invest in?") for i in range(n)]


DECISION_SPEC = DecisionSpec(
    benchmark="discrim_eval", question_id=0, answer_prefix='My answer would be "', yes_words=["yes", "Yes"], no_words=["no", "No"]
)


def decision_group(i: int) -> PromptGroup:
    """A DiscrimEval-like decision group: one loan question asked of three genders, answered yes or no."""
    genders = ("female", "male", "non-binary")
    return PromptGroup(
        group_id=f"d{i}", domain="discrim_eval", task="consistency", split="train", decision=DECISION_SPEC,
        variant_axes={"gender": list(genders)},
        members=[Member(variant_id=g, attributes={"gender": g}, text=f"Should the {30 + i}-year-old {g} applicant get the loan?")
                 for g in genders],
    )  # fmt: skip


# the machinery's objective in these tests: the paper's reward on free-text groups, no decision groups and no
# pairing term (the `paper` profile's); the default objective's parts have tests of their own
PAPER_WEIGHTS = {"entropy_helpfulness": 0.4, "stability": 0.6}


def tiny_params(**train) -> Params:
    """Default params with the paper's objective and a short, fast training section (overridable per key):
    a few 8-token rollouts at T = 1, each micro-batch in one forward, no intermediate state or rollout
    tables (the defaults, sized for 512-token answers, would chunk, save and log), in fp32 on every machine
    (these tests compare the trainer with plain fp32 computations; bf16 has tests of its own)."""
    p = Params()
    settings = {"steps": 2, "groups_per_step": 2, "samples_per_prompt": 3, "max_new_tokens": 8, "lr": 1e-2,
                "temperature": 1.0, "rows_per_forward": 0, "precision": "fp32", "save_every": 0, "log_rollouts_every": 0,
                "decision_groups_per_step": None, "decision_pairing": DecisionPairingConfig(weight=0.0),
                "rollout": p.train.rollout.model_copy(update={"engine": "transformers"}), **train}  # fmt: skip
    return p.model_copy(update={"train": p.train.model_copy(update=settings),
                                "reward": p.reward.model_copy(update={"weights": dict(PAPER_WEIGHTS)}),
                                "data": p.data.model_copy(update={"decision_groups": None})})  # fmt: skip
