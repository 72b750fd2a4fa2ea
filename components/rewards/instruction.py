"""Instruction compliance: sentences of an answer, the sentence limit its prompt states, and a reward
that makes consistency impossible to buy with length.

Sentences (`sentence_count`): every non-blank line is at least one sentence (a list item, a heading,
a line without a full stop), and a line holds as many sentences as pysbd's rule-based segmenter
finds in it (Sadvilkar & Neumann 2020, the "golden rules": "Dr.", "e.g.", "3.5" and "1." do not end
a sentence). pysbd alone joins list items that lack a full stop into one sentence; the line rule
is what counts them.

The limit (`max_sentences`) is read from the prompt the sample answered, which carries
``data.answer_instruction`` ("Answer in at most three sentences."): one source, the instruction
the model was given, so a prompt without a limit is never judged against one.

Why a compliance reward. The paper's stability term F_norm (Prabhune et al. 2025,
arXiv:2512.12858) pays a sample for an entropy close to the other variants'; the entropy of a longer
answer varies less between samples, so the study's main arm learned answers 2.8x longer than the
instruction allows, and a per-sample helpfulness H_norm that grows with length pays for the same.
`instruction_compliance` gives c(o) = 1 to an answer of at most N sentences and
c(o) = max(0, 1 − (S(o) − N) / N) beyond (0 at 2N sentences): bounded, flat inside the limit (a
shorter answer earns nothing more, so it does not pay for brevity either: H_norm keeps answers
informative), and beside F_norm with the same weight, breaking the instruction costs as much as
the most a sample can earn from stability.
"""

from __future__ import annotations

import re
from functools import lru_cache

import pysbd

from components.config import RewardConfig
from components.contracts.groups import PromptGroup
from components.contracts.rollouts import Rollout
from components.rewards.entropy import words
from components.rewards.registry import RewardInputError, is_free_text, register_reward

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
            "a single": 1, "a": 1, "single": 1}  # fmt: skip
_LIMIT = re.compile(
    r"\b(?:at\s+most|no\s+more\s+than|not\s+more\s+than|up\s+to|a\s+maximum\s+of|maximum\s+of|max\.?|in|within|using)\s+"
    r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten|a\s+single|single|a)\s+(?:short\s+|complete\s+|full\s+)?sentences?\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"\w", re.UNICODE)


@lru_cache(maxsize=1)
def _segmenter() -> pysbd.Segmenter:
    return pysbd.Segmenter(language="en", clean=False)


def sentences(text: str) -> list[str]:
    """The sentences of `text`: pysbd's segments of every non-blank line (a line is at least one)."""
    out = []
    for line in text.splitlines():
        if not _WORD.search(line):
            continue
        parts = [part.strip() for part in _segmenter().segment(line.strip()) if _WORD.search(part)]
        out += parts or [line.strip()]
    return out


def sentence_count(text: str) -> int:
    """S(o): the number of `sentences` (0 for an empty answer)."""
    return len(sentences(text))


def max_sentences(prompt: str) -> int | None:
    """N: the sentence limit the prompt states ("at most three sentences", "in 2 sentences", "no more
    than one sentence"); the last one when it states several; None when it states none."""
    found = _LIMIT.findall(prompt)
    if not found:
        return None
    word = re.sub(r"\s+", " ", found[-1].lower())
    return int(word) if word.isdigit() else _NUMBERS[word]


def complies(text: str, limit: int) -> bool:
    """S(o) <= N."""
    return sentence_count(text) <= limit


_NUMBER = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
_WORD_LIMIT = re.compile(
    rf"\b(?:at\s+most|no\s+more\s+than|not\s+more\s+than|up\s+to|a\s+maximum\s+of|in|within|under)\s+{_NUMBER}\s+words?\b",
    re.IGNORECASE,
)
_LIST_ITEMS = re.compile(
    rf"\b(?:a\s+)?(?:bulleted\s+|numbered\s+)?list\s+of\s+{_NUMBER}\s+(?:\w+\s+)?(?:points|items|bullets|tips)\b", re.IGNORECASE
)
_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+\S")


def _count(word: str) -> int:
    word = word.lower()
    return int(word) if word.isdigit() else _NUMBERS[word]


def max_words(prompt: str) -> int | None:
    """W: the word limit the prompt states ("Answer in at most 40 words."); None when it states none."""
    found = _WORD_LIMIT.findall(prompt)
    return _count(found[-1]) if found else None


def list_items(prompt: str) -> int | None:
    """L: the number of list items the prompt asks for ("Answer with a list of three points."); None when none."""
    found = _LIST_ITEMS.findall(prompt)
    return _count(found[-1]) if found else None


def item_count(text: str) -> int:
    """Lines of `text` that are list items: a bullet (-, *, •) or a number ("1." or "1)") then text."""
    return sum(bool(_ITEM.match(line)) for line in text.splitlines())


def follows(text: str, prompt: str) -> bool | None:
    """Does the answer obey every limit its prompt states: S(o) <= N sentences, words(o) <= W, exactly
    L list items? None when the prompt states none (nothing to judge)."""
    checks = []
    if (n := max_sentences(prompt)) is not None:
        checks.append(sentence_count(text) <= n)
    if (w := max_words(prompt)) is not None:
        checks.append(len(words(text)) <= w)
    if (items := list_items(prompt)) is not None:
        checks.append(item_count(text) == items)
    return all(checks) if checks else None


def compliance(text: str, limit: int) -> float:
    """c(o) = 1 when S(o) <= N, else max(0, 1 − (S(o) − N) / N): 0 at twice the limit."""
    excess = sentence_count(text) - limit
    return 1.0 if excess <= 0 else max(0.0, 1.0 - excess / limit)


@register_reward("instruction_compliance", kind="sample", applies=is_free_text)
def instruction_compliance(rollout: Rollout, group: PromptGroup, cfg: RewardConfig) -> float:
    """c(o) against the sentence limit of the prompt the sample answered (module docstring)."""
    limit = max_sentences(rollout.prompt)
    if limit is None or limit < 1:
        raise RewardInputError(
            f"group {group.group_id}, variant {rollout.variant_id}: instruction_compliance needs a sentence limit in the prompt "
            "(data.answer_instruction such as 'Answer in at most three sentences.')"
        )
    return compliance(rollout.completion, limit)


@register_reward("instruction_following", kind="sample", applies=is_free_text)
def instruction_following(rollout: Rollout, group: PromptGroup, cfg: RewardConfig) -> float:
    """IFEval's strict judgement of the group's instruction (`PromptGroup.instruction`, a family of
    ``data.instructions: families``): 1 when the answer follows it, else 0, by lm-eval's checker of
    that family (`components.instructions.ifeval`). Bounded and flat like c(o): an answer earns
    nothing for going past what the instruction asks (shorter, more bullets), so obedience is never
    bought with length. A group without a family's instruction is scored by its prompt's sentence
    limit, c(o) above; a group with neither is an error."""
    spec = group.instruction
    if spec is None:
        if max_sentences(rollout.prompt) is None:
            raise RewardInputError(
                f"group {group.group_id}, variant {rollout.variant_id}: instruction_following needs the group's instruction "
                "(data.instructions: families) or a sentence limit in the prompt"
            )
        return instruction_compliance(rollout, group, cfg)
    from components.instructions.ifeval import follows

    return float(follows(spec.family, spec.kwargs, rollout.prompt, rollout.completion)[0])
