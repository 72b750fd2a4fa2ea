"""Sentence counting, the prompt's sentence limit, and the instruction_compliance reward."""

from __future__ import annotations

import pytest

from components.config import RewardConfig
from components.contracts.groups import Member, PromptGroup
from components.contracts.rollouts import GroupBatch, Rollout
from components.rewards import compute_rewards
from components.rewards.instruction import compliance, complies, max_sentences, sentence_count, sentences
from components.rewards.registry import RewardInputError


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("", 0),
        ("   \n\n  ", 0),
        ("Invest in index funds.", 1),
        ("Invest in index funds", 1),  # no full stop: still one sentence
        ("Diversify. Keep costs low! Is that enough? Yes.", 4),
        # abbreviations, decimals and initials do not end a sentence
        ("Dr. Smith earns $3.5 million a year, e.g. from stocks. He is 40.", 2),
        ("The U.S. market rose 2.5% in Jan. and then fell.", 1),
        # list items and line breaks are sentences, numbered or not, with or without a full stop
        ("Options:\n1. Bonds\n2. Stocks\n3. Real estate", 4),
        ("- save more\n- spend less\n\n- invest the rest.", 3),
        ("1. Invest in bonds. 2. Save more.", 2),
        ("**Summary**\nBuy low. Sell high.", 3),
    ],
)
def test_sentence_count_hand_cases(text, count):
    assert sentence_count(text) == count, sentences(text)


@pytest.mark.parametrize(
    ("prompt", "limit"),
    [
        ("Should I buy bonds? Answer in at most three sentences.", 3),
        ("Reply in no more than 2 sentences.", 2),
        ("Keep it to at most one sentence, please.", 1),
        ("Explain in a single sentence.", 1),
        ("Use up to five short sentences.", 5),
        ("Answer in at most three sentences. Actually: at most two sentences.", 2),  # the last one counts
        ("Should I buy bonds?", None),
        ("Write three paragraphs.", None),
    ],
)
def test_max_sentences_parses_the_prompt(prompt, limit):
    assert max_sentences(prompt) == limit


def test_compliance_is_flat_inside_the_limit_and_falls_to_zero_at_twice_it():
    assert compliance("One. Two.", 3) == compliance("One. Two. Three.", 3) == 1.0
    assert compliance("One. Two. Three. Four.", 3) == pytest.approx(2 / 3)
    assert compliance("One. Two. Three. Four. Five. Six.", 3) == 0.0
    assert compliance("One. Two. Three. Four. Five. Six. Seven. Eight.", 3) == 0.0
    assert complies("One. Two. Three.", 3) and not complies("One. Two. Three. Four.", 3)
    assert sentence_count("J. R. R. Tolkien wrote it.") == 1  # initials are not sentences


def _group(prompt_suffix: str) -> PromptGroup:
    members = [
        Member(variant_id="w", text=f"As a woman, should I buy bonds?{prompt_suffix}", attributes={"gender": "woman"}),
        Member(variant_id="m", text=f"As a man, should I buy bonds?{prompt_suffix}", attributes={"gender": "man"}),
    ]
    return PromptGroup(
        group_id="g1", task="consistency", split="train", domain="investment", members=members, variant_axes={"gender": ["woman", "man"]}
    )


def _rollouts(group: PromptGroup, texts: list[str]) -> list[Rollout]:
    return [
        Rollout.of(0, group, group.members[i % 2], completion=text, prompt_ids=(1,), completion_ids=(2,), truncated=False)
        for i, text in enumerate(texts)
    ]


def test_reward_scores_each_answer_against_its_prompts_limit():
    group = _group(" Answer in at most three sentences.")
    texts = ["Yes. Bonds are safe.", "No.\n- risk\n- fees\n- taxes\n- time", "Alpha. Beta. Gamma. Delta.", ""]
    cfg = RewardConfig(weights={"instruction_compliance": 1.0})
    total, parts = compute_rewards(GroupBatch([group], _rollouts(group, texts)), cfg)
    assert parts["instruction_compliance"].tolist() == pytest.approx([1.0, 1 - 2 / 3, 2 / 3, 1.0])
    assert total.tolist() == pytest.approx(parts["instruction_compliance"].tolist())


def test_reward_refuses_a_prompt_without_a_limit():
    group = _group("")
    cfg = RewardConfig(weights={"instruction_compliance": 1.0})
    with pytest.raises(RewardInputError, match="g1.*sentence limit"):
        compute_rewards(GroupBatch([group], _rollouts(group, ["Yes.", "No."])), cfg)


def test_instruction_following_scores_the_group_s_family_by_ifeval_s_strict_check():
    from components.contracts.groups import InstructionSpec

    spec = InstructionSpec(family="punctuation:no_comma", kwargs={}, text="Do not use any commas.")
    group = _group(" Do not use any commas.").model_copy(update={"instruction": spec})
    texts = ["Bonds are safe and simple.", "Bonds, stocks, and cash.", "Keep it plain: no pauses.", ""]
    cfg = RewardConfig(weights={"instruction_following": 1.0})
    _, parts = compute_rewards(GroupBatch([group], _rollouts(group, texts)), cfg)
    assert parts["instruction_following"].tolist() == [1.0, 0.0, 1.0, 0.0]  # an empty answer follows nothing (IFEval)


def test_instruction_following_takes_the_sentence_limit_where_no_family_was_given_and_refuses_neither():
    cfg = RewardConfig(weights={"instruction_following": 1.0})
    limited = _group(" Answer in at most three sentences.")
    texts = ["Yes. Bonds are safe.", "Alpha. Beta. Gamma. Delta."]
    _, parts = compute_rewards(GroupBatch([limited], _rollouts(limited, texts)), cfg)
    assert parts["instruction_following"].tolist() == pytest.approx([1.0, 2 / 3])
    with pytest.raises(RewardInputError, match="g1.*instruction_following needs"):
        compute_rewards(GroupBatch([_group("")], _rollouts(_group(""), ["Yes.", "No."])), cfg)
